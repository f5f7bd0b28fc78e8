package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
)

// The request bodies of the two legs of vLLM's NIXL hand-off, built from the
// client's body by editing its top-level members: every other member is kept
// as the client sent it, in its order.

// kvTransferKey is the member that carries the hand-off in both directions.
const kvTransferKey = "kv_transfer_params"

// prefillRequestParams asks a NixlConnector engine to prefill for a remote
// decode and keep the blocks for it. The null fields are those vLLM's own
// proxy sends.
var prefillRequestParams = json.RawMessage(`{"do_remote_decode":true,"do_remote_prefill":false,` +
	`"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// maxKVParams bounds the kv_transfer_params object taken from a prefill
// answer; vLLM's is a few hundred bytes plus a block id list.
const maxKVParams = 256 << 10

// member is one top-level member of a JSON object: its key and its raw value.
type member struct {
	key string
	raw json.RawMessage
}

// members reads body, a single JSON object, into its top-level members in
// order. The error wraps ErrInvalidBody.
func members(body []byte) ([]member, error) {
	invalid := func(err error) error { return fmt.Errorf("%w: %v", ErrInvalidBody, err) }
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, invalid(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: top level is %v", ErrInvalidBody, tok)
	}
	var ms []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalid(err)
		}
		ms = append(ms, member{key: tok.(string), raw: raw})
	}
	if _, err := dec.Token(); err != nil {
		return nil, invalid(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the object", ErrInvalidBody)
	}
	return ms, nil
}

// object writes ms as a JSON object.
func object(ms []member) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(m.key) // a string always marshals
		b.Write(k)
		b.WriteByte(':')
		b.Write(m.raw)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// edit returns ms without the members named in drop, with the values in set
// replacing those of members of the same key (in place) or appended (in
// setOrder) when absent.
func edit(ms []member, drop []string, set map[string]json.RawMessage, setOrder []string) []member {
	out := make([]member, 0, len(ms)+len(set))
	done := make(map[string]bool, len(set))
	for _, m := range ms {
		if v, ok := set[m.key]; ok {
			if !done[m.key] { // a duplicate key is written once
				out = append(out, member{m.key, v})
				done[m.key] = true
			}
			continue
		}
		if !slices.Contains(drop, m.key) {
			out = append(out, m)
		}
	}
	for _, k := range setOrder {
		if !done[k] {
			out = append(out, member{k, set[k]})
		}
	}
	return out
}

func has(ms []member, key string) bool {
	return slices.ContainsFunc(ms, func(m member) bool { return m.key == key })
}

// prefillBody is the prefill leg's body: the client's request, not streamed,
// for one output token (max_tokens 1, and max_completion_tokens 1 when the
// client set it), without stream_options, asking for a remote decode.
func prefillBody(ms []member) []byte {
	one := json.RawMessage("1")
	set := map[string]json.RawMessage{
		"stream":      json.RawMessage("false"),
		"max_tokens":  one,
		kvTransferKey: prefillRequestParams,
	}
	order := []string{"stream", "max_tokens", kvTransferKey}
	if has(ms, "max_completion_tokens") {
		set["max_completion_tokens"] = one
	}
	return object(edit(ms, []string{"stream_options"}, set, order))
}

// decodeBody is the decode leg's body: the client's request as sent (streamed
// if it asked), carrying the prefill's transfer parameters unchanged.
func decodeBody(ms []member, params json.RawMessage) []byte {
	return object(edit(ms, nil, map[string]json.RawMessage{kvTransferKey: params}, []string{kvTransferKey}))
}

// wholeBody is the client's request without any kv_transfer_params of its
// own: in a disaggregated pool only the gateway may tell a replica where to
// fetch KV blocks from.
func wholeBody(ms []member) []byte {
	return object(edit(ms, []string{kvTransferKey}, nil, nil))
}

// kvParams returns the top-level kv_transfer_params object of a prefill
// answer, byte for byte, or false when there is none (absent, null, not an
// object, or larger than maxKVParams).
func kvParams(answer []byte) (json.RawMessage, bool) {
	var v struct {
		Params json.RawMessage `json:"kv_transfer_params"`
	}
	if json.Unmarshal(answer, &v) != nil {
		return nil, false
	}
	p := bytes.TrimSpace(v.Params)
	if len(p) < 2 || p[0] != '{' || len(p) > maxKVParams {
		return nil, false
	}
	return p, true
}
