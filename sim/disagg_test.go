package sim

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// pdPair starts a prefill and a decode replica sharing clk, with per-token
// prefill costs so a skipped prefill shows in the recorded delays.
func pdPair(t *testing.T, clk Clock) (prefill, decode string) {
	t.Helper()
	c := zeroLatency()
	c.TTFTBase, c.PrefillPerToken, c.DecodePerToken = 5*time.Millisecond, time.Millisecond, time.Millisecond
	c.KVLease = 30 * time.Second
	pc, dc := c, c
	pc.Name, pc.Role = "p", RolePrefill
	dc.Name, dc.Role = "d", RoleDecode
	_, prefill = start(t, pc, Options{Clock: clk})
	_, decode = start(t, dc, Options{Clock: clk})
	return prefill, decode
}

const pdPrompt = "Summarise the plot of a long novel about a lighthouse keeper in three sentences, please."

// prefillParams runs the prefill leg as the gateway sends it and returns the
// answer's kv_transfer_params, raw.
func prefillParams(t *testing.T, base string) json.RawMessage {
	t.Helper()
	resp, b := post(t, base+"/v1/completions", `{"prompt":`+strconv.Quote(pdPrompt)+`,"max_tokens":1,"stream":false,`+
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}}`)
	require.Equal(t, 200, resp.StatusCode, string(b))
	var v struct {
		Params json.RawMessage `json:"kv_transfer_params"`
		Usage  usage           `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(b, &v))
	require.Equal(t, 1, v.Usage.CompletionTokens)
	require.NotEmpty(t, v.Params, "a prefill for a remote decode answers with kv_transfer_params: %s", b)
	return v.Params
}

func decodeWith(t *testing.T, base string, params json.RawMessage) (string, usage, string) {
	t.Helper()
	resp, b := post(t, base+"/v1/completions", `{"prompt":`+strconv.Quote(pdPrompt)+`,"max_tokens":8,"kv_transfer_params":`+string(params)+`}`)
	require.Equal(t, 200, resp.StatusCode, string(b))
	var v struct {
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
		Usage usage `json:"usage"`
	}
	require.NoError(t, json.Unmarshal(b, &v))
	return v.Choices[0].Text, v.Usage, resp.Header.Get(HeaderKVTransferTokens)
}

func TestPrefillAnswersTransferParams(t *testing.T) {
	clk := newInstantClock()
	p, _ := pdPair(t, clk)
	var params kvTransferOut
	require.NoError(t, json.Unmarshal(prefillParams(t, p), &params))
	require.True(t, params.RemotePrefill)
	require.False(t, params.RemoteDecode)
	require.Equal(t, kvBlocks(pdPrompt), params.BlockIDs)
	require.True(t, strings.HasPrefix(params.EngineID, "sim-"))
	require.Equal(t, "127.0.0.1", params.Host)
	require.NotZero(t, params.Port)
	require.Equal(t, clk.Now().Add(30*time.Second).UnixMilli(), params.ExpiresAtMS)

	// Streamed, the prefill carries no parameters: a stream has no place for them.
	resp, b := post(t, p+"/v1/completions", `{"prompt":"x","max_tokens":1,"stream":true,"kv_transfer_params":{"do_remote_decode":true}}`)
	require.Equal(t, 200, resp.StatusCode)
	require.NotContains(t, string(b), "kv_transfer_params")
}

func TestDecodeSkipsPrefillAndCountsTransfer(t *testing.T) {
	clk := newInstantClock()
	p, d := pdPair(t, clk)
	params := prefillParams(t, p)
	before := len(clk.recorded())
	text, u, hdr := decodeWith(t, d, params)
	require.Equal(t, GeneratedText(pdPrompt, 8), text, "the decode of transferred blocks answers what one engine would")
	require.Equal(t, 5*time.Millisecond, clk.recorded()[before], "no prefill cost: TTFTBase alone")
	require.Zero(t, u.PromptTokensDetails.CachedTokens, "vLLM reports no cached tokens for transferred KV")
	require.Equal(t, strconv.Itoa(CountTokens(pdPrompt)), hdr)
	require.Equal(t, float64(CountTokens(pdPrompt)), metricValue(t, d, "mock-fast", "vllm:prompt_tokens_by_source_total", `source="external_kv_transfer"`))
	require.Zero(t, metricValue(t, d, "mock-fast", "vllm:prompt_tokens_by_source_total", `source="local_compute"`))
	require.Equal(t, float64(CountTokens(pdPrompt)), metricValue(t, p, "mock-fast", "vllm:prompt_tokens_by_source_total", `source="local_compute"`))
}

func TestStaleOrForeignParamsGiveWrongText(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(clk *instantClock, params json.RawMessage) json.RawMessage
	}{
		{"past the lease", func(clk *instantClock, params json.RawMessage) json.RawMessage {
			require.NoError(t, clk.Sleep(context.Background(), 31*time.Second))
			return params
		}},
		{"another prompt's blocks", func(_ *instantClock, params json.RawMessage) json.RawMessage {
			var v map[string]any
			require.NoError(t, json.Unmarshal(params, &v))
			v["remote_block_ids"] = []int{1, 2, 3}
			b, _ := json.Marshal(v)
			return b
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newInstantClock()
			p, d := pdPair(t, clk)
			params := tc.spoil(clk, prefillParams(t, p))
			text, _, _ := decodeWith(t, d, params)
			require.NotEqual(t, GeneratedText(pdPrompt, 8), text, "200 with the wrong text, as vLLM after its lease")
		})
	}
}

func TestNoRoleIgnoresTransferParams(t *testing.T) {
	_, base := start(t, zeroLatency())
	resp, b := post(t, base+"/v1/completions", `{"prompt":"hello","max_tokens":1,"kv_transfer_params":{"do_remote_decode":true}}`)
	require.Equal(t, 200, resp.StatusCode)
	require.NotContains(t, string(b), "kv_transfer_params")
}

func TestListenLocalPD(t *testing.T) {
	l, err := ListenLocalPD(zeroLatency(), 3, 1, nil)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	ids, _ := l.Replicas()
	require.Equal(t, []string{"mockllm-fast-prefill-0", "mockllm-fast-decode-0", "mockllm-fast-decode-1"}, ids)
	require.Equal(t, []string{RolePrefill, RoleDecode, RoleDecode}, l.Roles())
	_, err = ListenLocalPD(zeroLatency(), 2, 2, nil)
	require.ErrorContains(t, err, "leave none to decode")
}

func TestPrefillInterferenceStretchesDecodeSteps(t *testing.T) {
	c := zeroLatency()
	c.DecodePerToken, c.PrefillInterference = 10*time.Millisecond, 0.5
	s, err := New(c, Options{})
	require.NoError(t, err)
	require.Equal(t, 10*time.Millisecond, s.decodeStep())
	s.prefilling.Add(2)
	require.Equal(t, 20*time.Millisecond, s.decodeStep(), "two prefills running: 1 + 0.5 x 2")
}
