package sim

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestChatCompletion(t *testing.T) {
	msgs := []Message{{Role: "system", Content: "You are terse."}, {Role: "user", Content: "Name a colour."}}
	prompt := RenderChat(msgs)
	require.Equal(t, "system: You are terse.\nuser: Name a colour.\n", prompt)

	for _, tc := range []struct {
		name       string
		extra      string
		wantTokens int
		wantFinish string
	}{
		{"default length", ``, 32, "stop"},
		{"max_tokens", `,"max_tokens":5`, 5, "length"},
		{"max_completion_tokens wins", `,"max_tokens":5,"max_completion_tokens":7`, 7, "length"},
		{"capped", `,"max_tokens":100000`, 4096, "length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
			body := `{"model":"my-model","messages":[{"role":"system","content":"You are terse."},` +
				`{"role":"user","content":[{"type":"text","text":"Name a "},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"colour."}]}]` +
				tc.extra + `}`
			resp, b := post(t, base+"/v1/chat/completions", body)
			require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
			assert.Equal(t, "mockllm-fast", resp.Header.Get(HeaderReplica))
			assert.Equal(t, "application/json", resp.Header.Get("Content-Type"))

			var got chatCompletion
			require.NoError(t, json.Unmarshal(b, &got))
			assert.True(t, strings.HasPrefix(got.ID, "chatcmpl-"), got.ID)
			assert.Equal(t, "chat.completion", got.Object)
			assert.Equal(t, "my-model", got.Model)
			assert.Equal(t, int64(1_700_000_000), got.Created)
			require.Len(t, got.Choices, 1)
			assert.Equal(t, 0, got.Choices[0].Index)
			assert.Equal(t, "assistant", got.Choices[0].Message.Role)
			assert.Equal(t, GeneratedText(prompt, tc.wantTokens), got.Choices[0].Message.Content)
			assert.Len(t, strings.Fields(got.Choices[0].Message.Content), tc.wantTokens)
			assert.Equal(t, tc.wantFinish, got.Choices[0].FinishReason)
			assert.Equal(t, usage{PromptTokens: 11, CompletionTokens: tc.wantTokens, TotalTokens: 11 + tc.wantTokens}, got.Usage)
		})
	}
}

func TestCompletion(t *testing.T) {
	_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
	for _, prompt := range []string{`"Once upon a time"`, `["Once upon a time"]`} {
		resp, b := post(t, base+"/v1/completions", `{"prompt":`+prompt+`,"max_tokens":4}`)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var got textCompletion
		require.NoError(t, json.Unmarshal(b, &got))
		assert.True(t, strings.HasPrefix(got.ID, "cmpl-"), got.ID)
		assert.Equal(t, "text_completion", got.Object)
		assert.Equal(t, "mock-fast", got.Model, "no model in the request: the configured one")
		require.Len(t, got.Choices, 1)
		assert.Equal(t, GeneratedText("Once upon a time", 4), got.Choices[0].Text)
		require.NotNil(t, got.Choices[0].FinishReason)
		assert.Equal(t, "length", *got.Choices[0].FinishReason)
		require.NotNil(t, got.Usage)
		assert.Equal(t, usage{PromptTokens: 4, CompletionTokens: 4, TotalTokens: 8}, *got.Usage)
	}
	// The logprobs key is present and null, as the OpenAI clients expect.
	_, b := post(t, base+"/v1/completions", `{"prompt":"x","max_tokens":1}`)
	choice := jsonBody(t, b)["choices"].([]any)[0].(map[string]any)
	v, ok := choice["logprobs"]
	assert.True(t, ok)
	assert.Nil(t, v)
}

func TestModelsHealthRouting(t *testing.T) {
	_, base := start(t, zeroLatency())

	resp, b := get(t, base+"/health")
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "ok", string(b))

	resp, b = get(t, base+"/v1/models")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var models modelList
	require.NoError(t, json.Unmarshal(b, &models))
	require.Len(t, models.Data, 1)
	assert.Equal(t, "list", models.Object)
	assert.Equal(t, modelCard{ID: "mock-fast", Object: "model", Created: models.Data[0].Created, OwnedBy: "mockllm"}, models.Data[0])

	resp, b = get(t, base+"/v1/nope")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	assert.Equal(t, "invalid_request_error", jsonBody(t, b)["error"].(map[string]any)["type"])

	resp, b = get(t, base+"/v1/chat/completions")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "POST", resp.Header.Get("Allow"))
	assert.Contains(t, jsonBody(t, b)["error"].(map[string]any)["message"], "GET")

	resp, _ = post(t, base+"/metrics", "")
	assert.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	assert.Equal(t, "mockllm-fast", resp.Header.Get(HeaderReplica))
}

func TestBadInput(t *testing.T) {
	_, base := start(t, zeroLatency())
	for _, tc := range []struct {
		name, path, body string
		wantParam        any // nil: null
		wantInMessage    string
	}{
		{"invalid JSON", "/v1/chat/completions", `{"messages":`, nil, "invalid JSON"},
		{"empty body", "/v1/chat/completions", ``, nil, "invalid JSON"},
		{"not an object", "/v1/chat/completions", `[1,2]`, nil, "JSON object"},
		{"missing messages", "/v1/chat/completions", `{"model":"m"}`, "messages", "required"},
		{"empty messages", "/v1/chat/completions", `{"messages":[]}`, "messages", "at least one"},
		{"messages not an array", "/v1/chat/completions", `{"messages":"hi"}`, "messages", "expected array"},
		{"missing role", "/v1/chat/completions", `{"messages":[{"content":"hi"}]}`, "messages[0].role", "required"},
		{"role not a string", "/v1/chat/completions", `{"messages":[{"role":1,"content":"hi"}]}`, "messages.role", "expected string"},
		{"content a number", "/v1/chat/completions", `{"messages":[{"role":"user","content":5}]}`, "messages[0].content", "expected a string"},
		{"text part without text", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, "messages[0].content[0].text", "required"},
		{"stream not a bool", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream":"yes"}`, "stream", "expected boolean"},
		{"max_tokens zero", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, "max_tokens", ">= 1"},
		{"max_completion_tokens negative", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":-1}`, "max_completion_tokens", ">= 1"},
		{"max_tokens a string", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"max_tokens":"9"}`, "max_tokens", "expected number"},
		{"n above 1", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"n":2}`, "n", "only 1"},
		{"stream_options without stream", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}],"stream_options":{"include_usage":true}}`, "stream_options", "stream is true"},
		{"missing prompt", "/v1/completions", `{"model":"m"}`, "prompt", "required"},
		{"prompt a number", "/v1/completions", `{"prompt":3}`, "prompt", "expected a string"},
		{"batched prompt", "/v1/completions", `{"prompt":["a","b"]}`, "prompt", "batched"},
		{"token prompt", "/v1/completions", `{"prompt":[1,2]}`, "prompt", "token arrays"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, b := post(t, base+tc.path, tc.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(b))
			e := jsonBody(t, b)["error"].(map[string]any)
			assert.Equal(t, "invalid_request_error", e["type"])
			assert.Equal(t, tc.wantParam, e["param"])
			code, ok := e["code"]
			assert.True(t, ok, "code present")
			assert.Nil(t, code)
			assert.Contains(t, e["message"], tc.wantInMessage)
		})
	}
}

func TestStreamingSendsEachTokenOnItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name, path, body, prompt string
	}{
		{"chat", "/v1/chat/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`, "user: hi\n"},
		{"completions", "/v1/completions", `{"model":"m","stream":true,"stream_options":{"include_usage":true},"max_tokens":3,"prompt":"hi"}`, "hi"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newGateClock()
			_, base := start(t, zeroLatency(), Options{Clock: clock})
			t.Cleanup(clock.unblock)

			resps := make(chan *http.Response, 1)
			go func() {
				resp, err := http.Post(base+tc.path, "application/json", strings.NewReader(tc.body))
				if err != nil {
					t.Error(err)
					close(resps)
					return
				}
				resps <- resp
			}()
			clock.step(t) // prefill
			resp, ok := <-resps
			require.True(t, ok)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			assert.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
			assert.Equal(t, "0", resp.Header.Get(HeaderCachedTokens))
			sse := sseReader{bufio.NewReader(resp.Body)}

			var text strings.Builder
			for i := range 3 {
				if i > 0 {
					// The server is now blocked before token i, so token i-1
					// can only have been read because it was flushed alone.
					clock.step(t)
				}
				data, err := sse.next()
				require.NoError(t, err)
				var c map[string]any
				require.NoError(t, json.Unmarshal([]byte(data), &c))
				assert.Equal(t, "m", c["model"])
				choice := c["choices"].([]any)[0].(map[string]any)
				assert.Equal(t, 0.0, choice["index"])
				wantFinish := any(nil)
				if i == 2 {
					wantFinish = "length"
				}
				assert.Equal(t, wantFinish, choice["finish_reason"])
				if tc.path == "/v1/chat/completions" {
					assert.Equal(t, "chat.completion.chunk", c["object"])
					d := choice["delta"].(map[string]any)
					if i == 0 {
						assert.Equal(t, "assistant", d["role"])
					} else {
						assert.NotContains(t, d, "role")
					}
					assert.Equal(t, Token(tc.prompt, i), d["content"])
					text.WriteString(d["content"].(string))
				} else {
					assert.Equal(t, "text_completion", c["object"])
					text.WriteString(choice["text"].(string))
				}
			}
			assert.Equal(t, GeneratedText(tc.prompt, 3), text.String())

			data, err := sse.next()
			require.NoError(t, err)
			var last struct {
				Choices []any  `json:"choices"`
				Usage   *usage `json:"usage"`
			}
			require.NoError(t, json.Unmarshal([]byte(data), &last))
			assert.NotNil(t, last.Choices)
			assert.Empty(t, last.Choices)
			require.NotNil(t, last.Usage)
			n := CountTokens(tc.prompt)
			assert.Equal(t, usage{PromptTokens: n, CompletionTokens: 3, TotalTokens: n + 3}, *last.Usage)

			data, err = sse.next()
			require.NoError(t, err)
			assert.Equal(t, "[DONE]", data)
			_, err = sse.next()
			assert.ErrorIs(t, err, io.EOF)
		})
	}
}

func TestStreamingWithoutUsage(t *testing.T) {
	_, base := start(t, zeroLatency(), Options{Clock: newInstantClock()})
	resp, b := post(t, base+"/v1/chat/completions", `{"stream":true,"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	events := strings.Split(strings.TrimSuffix(string(b), "\n\n"), "\n\n")
	require.Len(t, events, 3)
	assert.Equal(t, "data: [DONE]", events[2])
	assert.NotContains(t, events[1], `"usage"`)
}

func TestPrefixCacheMakesPrefillCheaper(t *testing.T) {
	cfg := zeroLatency()
	cfg.TTFTBase = time.Millisecond
	cfg.PrefillPerToken = time.Millisecond
	clock := newInstantClock()
	s, base := start(t, cfg, Options{Clock: clock})

	system := strings.Repeat("You are a careful assistant who answers briefly. ", 20) // 1,000 bytes
	ask := func(question string) (prompt string, cached int, u usage) {
		msgs := []Message{{Role: "system", Content: system}, {Role: "user", Content: question}}
		body := mustJSON(t, map[string]any{"max_tokens": 1, "messages": []map[string]string{
			{"role": "system", "content": system}, {"role": "user", "content": question}}})
		resp, b := post(t, base+"/v1/chat/completions", body)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		var got chatCompletion
		require.NoError(t, json.Unmarshal(b, &got))
		return RenderChat(msgs), got.Usage.PromptTokensDetails.CachedTokens, got.Usage
	}

	p1, cached1, u1 := ask("What is 2+2?")
	p2, cached2, u2 := ask("Name a prime.")
	assert.Zero(t, cached1, "cold cache")

	common := 0
	for common < len(p1) && p1[common] == p2[common] {
		common++
	}
	wantCached := (common / cfg.BlockChars) * cfg.BlockChars / 4
	require.Greater(t, wantCached, 200)
	assert.Equal(t, wantCached, cached2)

	// Each request sleeps twice: prefill, then the whole decode.
	sleeps := clock.recorded()
	require.Len(t, sleeps, 4)
	assert.Equal(t, cfg.PrefillDelay(u1.PromptTokens, 0), sleeps[0])
	assert.Equal(t, cfg.PrefillDelay(u2.PromptTokens, cached2), sleeps[2])
	assert.Less(t, sleeps[2], sleeps[0]/4, "a warm prefix makes the first token much faster")

	assert.Equal(t, float64(cached2), metricValue(t, base, "mock-fast", "vllm:prefix_cache_hits_total", ""))
	assert.Equal(t, float64(u1.PromptTokens+u2.PromptTokens), metricValue(t, base, "mock-fast", "vllm:prefix_cache_queries_total", ""))
	assert.Equal(t, 2.0, metricValue(t, base, "mock-fast", "vllm:time_to_first_token_seconds_count", ""))
	st := s.Stats()
	assert.Equal(t, int64(cached2), st.PrefixHitTokens)
	assert.Equal(t, len(p1)/cfg.BlockChars+len(p2)/cfg.BlockChars-common/cfg.BlockChars, st.CachedBlocks)
}

func TestQueueingWhenSlotsAreFull(t *testing.T) {
	cfg := zeroLatency()
	cfg.MaxRunning, cfg.MaxWaiting = 1, 1
	clock := newGateClock()
	s, base := start(t, cfg, Options{Clock: clock})
	t.Cleanup(clock.unblock)
	body := `{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`

	codes := make(chan int, 2)
	send := func() {
		resp, b := post(t, base+"/v1/chat/completions", body)
		if resp.StatusCode != http.StatusOK {
			t.Errorf("status %d: %s", resp.StatusCode, b)
		}
		codes <- resp.StatusCode
	}
	go send()
	prefillA := clock.next(t) // A holds the only slot, prefilling
	go send()
	require.Eventually(t, func() bool { return s.Stats().Waiting == 1 }, 5*time.Second, time.Millisecond)

	assert.Equal(t, 1.0, metricValue(t, base, "mock-fast", "vllm:num_requests_running", ""))
	assert.Equal(t, 1.0, metricValue(t, base, "mock-fast", "vllm:num_requests_waiting", ""))
	assert.Greater(t, metricValue(t, base, "mock-fast", "vllm:kv_cache_usage_perc", ""), 0.0)

	resp, b := post(t, base+"/v1/chat/completions", body)
	assert.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	assert.Equal(t, "1", resp.Header.Get("Retry-After"))
	assert.Equal(t, "rate_limit_error", jsonBody(t, b)["error"].(map[string]any)["type"])
	assert.Equal(t, 1.0, metricValue(t, base, "mock-fast", "mockllm_requests_rejected_total", `reason="queue_full"`))

	prefillA.release()
	clock.step(t) // A's decode
	assert.Equal(t, http.StatusOK, <-codes)
	clock.step(t) // B's prefill: B got the slot
	clock.step(t) // B's decode
	assert.Equal(t, http.StatusOK, <-codes)
	require.Eventually(t, func() bool {
		st := s.Stats()
		return st.Running == 0 && st.Waiting == 0 && st.KVCacheUsage == 0
	}, 5*time.Second, time.Millisecond)
	assert.Equal(t, 2.0, metricValue(t, base, "mock-fast", "vllm:request_success_total", `finished_reason="length"`))
}

func TestClientDisconnectFreesSlot(t *testing.T) {
	clock := newGateClock()
	s, base := start(t, zeroLatency(), Options{Clock: clock})
	t.Cleanup(clock.unblock)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
	}()
	clock.next(t) // prefill, never released
	assert.Equal(t, 1, s.Stats().Running)
	cancel()
	<-done
	require.Eventually(t, func() bool { return s.Stats().Running == 0 }, 5*time.Second, time.Millisecond)
	assert.Equal(t, 1.0, metricValue(t, base, "mock-fast", "vllm:request_success_total", `finished_reason="abort"`))
}

func TestFaultInjection(t *testing.T) {
	t.Run("error_rate", func(t *testing.T) {
		cfg := zeroLatency()
		cfg.ErrorRate = 1
		_, base := start(t, cfg, Options{Clock: newInstantClock()})
		resp, b := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		assert.Equal(t, "server_error", jsonBody(t, b)["error"].(map[string]any)["type"])
	})

	t.Run("stall_first_byte", func(t *testing.T) {
		cfg := zeroLatency()
		cfg.StallFirstByte = 3 * time.Second
		clock := newInstantClock()
		_, base := start(t, cfg, Options{Clock: clock})
		resp, _ := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, 3*time.Second, clock.recorded()[0])
	})

	t.Run("close_mid_stream", func(t *testing.T) {
		cfg := zeroLatency()
		cfg.CloseMidStreamRate = 1
		cfg.CloseAfterChunks = 2
		s, base := start(t, cfg, Options{Clock: newInstantClock()})
		resp, err := http.Post(base+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		sse := sseReader{bufio.NewReader(resp.Body)}
		var events []string
		for {
			data, err := sse.next()
			if err != nil {
				assert.True(t, errors.Is(err, io.ErrUnexpectedEOF), "got %v", err)
				break
			}
			events = append(events, data)
		}
		assert.Len(t, events, 2)
		for _, e := range events {
			assert.NotEqual(t, "[DONE]", e)
		}
		require.Eventually(t, func() bool { return s.Stats().Running == 0 }, 5*time.Second, time.Millisecond)

		// Non-streaming requests are never cut.
		resp2, _ := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
		assert.Equal(t, http.StatusOK, resp2.StatusCode)
	})
}

func TestCloseRefusesNewWork(t *testing.T) {
	s, base := start(t, zeroLatency())
	require.NoError(t, s.Close())
	resp, _ := post(t, base+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi"}]}`)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, _ = get(t, base+"/health")
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestJitterIsSeededAndBounded(t *testing.T) {
	cfg := zeroLatency()
	cfg.TTFTBase = 100 * time.Millisecond
	cfg.Jitter = 0.5
	run := func() []time.Duration {
		clock := newInstantClock()
		_, base := start(t, cfg, Options{Clock: clock})
		for range 5 {
			post(t, base+"/v1/completions", `{"prompt":"","max_tokens":1}`)
		}
		return clock.recorded()
	}
	a, b := run(), run()
	assert.Equal(t, a, b, "same seed, same delays")
	for i := 0; i < len(a); i += 2 {
		assert.GreaterOrEqual(t, a[i], 50*time.Millisecond)
		assert.LessOrEqual(t, a[i], 150*time.Millisecond)
	}
}

// The time per output token is exported under vLLM's V1 name, one sample
// per gap between tokens, so the gateway's least-latency policy reads the
// simulator as it reads vLLM.
func TestInterTokenLatencyMetric(t *testing.T) {
	cfg := zeroLatency()
	cfg.DecodePerToken = 10 * time.Millisecond
	_, base := start(t, cfg, Options{Clock: newInstantClock()})

	resp, b := post(t, base+"/v1/chat/completions", `{"stream":true,"max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	resp, b = post(t, base+"/v1/completions", `{"max_tokens":3,"prompt":"hi"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	resp, b = post(t, base+"/v1/completions", `{"max_tokens":1,"prompt":"one token has no gap"}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))

	assert.Equal(t, 6.0, metricValue(t, base, "mock-fast", "vllm:inter_token_latency_seconds_count", ""), "4 gaps streamed + 2 not")
	assert.InDelta(t, 0.06, metricValue(t, base, "mock-fast", "vllm:inter_token_latency_seconds_sum", ""), 1e-9)
	assert.Equal(t, 9.0, metricValue(t, base, "mock-fast", "vllm:generation_tokens_total", ""))
	assert.Equal(t, 3.0, metricValue(t, base, "mock-fast", "vllm:time_to_first_token_seconds_count", ""))
}
