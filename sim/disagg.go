package sim

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Prefill/decode disaggregation as vLLM's NixlConnector does it, seen from
// outside: a replica with Role prefill (or both) given a non-streaming request
// whose kv_transfer_params has do_remote_decode true answers with a top-level
// kv_transfer_params object naming its engine, the blocks holding the
// prompt's KV cache, its host and port, and when it frees them (expires_at_ms:
// KVLease after the answer). A replica with Role decode (or both) given
// do_remote_prefill true with such an object skips the prefill: its first
// token comes after TTFTBase alone, and the prompt's tokens are counted in
// vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}, not
// local_compute; usage.prompt_tokens_details.cached_tokens reads 0, as vLLM's
// does. Parameters past their expiry, or naming blocks of another prompt, are
// what a real engine reads freed or reused blocks from: the answer is 200 with
// the wrong text. A replica without a role ignores kv_transfer_params, as an
// engine without a KV connector does.

// Replica roles (Config.Role): which side of vLLM's KV hand-off a replica
// plays. "" has no KV connector.
const (
	RolePrefill = "prefill" // kv_producer
	RoleDecode  = "decode"  // kv_consumer
	RoleBoth    = "both"    // kv_both
)

// kvBlockTokens is how many prompt tokens one transferred block holds
// (vLLM's default block size).
const kvBlockTokens = 16

// Token sources, the values of vllm:prompt_tokens_by_source_total's source
// label.
const (
	sourceLocalCompute = "local_compute"
	sourceCacheHit     = "local_cache_hit"
	sourceExternal     = "external_kv_transfer"
)

// kvRequest is what a request's kv_transfer_params asks of the engine.
type kvRequest struct {
	RemoteDecode  bool    `json:"do_remote_decode"`
	RemotePrefill bool    `json:"do_remote_prefill"`
	EngineID      *string `json:"remote_engine_id"`
	BlockIDs      []int64 `json:"remote_block_ids"`
	Host          *string `json:"remote_host"`
	Port          *int    `json:"remote_port"`
	ExpiresAtMS   *int64  `json:"expires_at_ms"`
}

// kvTransferOut is a prefill replica's answer to do_remote_decode: the
// parameters a decode replica needs to fetch the prompt's blocks.
type kvTransferOut struct {
	RemotePrefill bool    `json:"do_remote_prefill"`
	RemoteDecode  bool    `json:"do_remote_decode"`
	BlockIDs      []int64 `json:"remote_block_ids"`
	EngineID      string  `json:"remote_engine_id"`
	Host          string  `json:"remote_host"`
	Port          int     `json:"remote_port"`
	TPSize        int     `json:"tp_size"`
	ExpiresAtMS   int64   `json:"expires_at_ms"`
}

// parseKVTransfer reads the request's kv_transfer_params; nil when absent or
// null.
func parseKVTransfer(body []byte) (*kvRequest, *apiError) {
	var in struct {
		KV *kvRequest `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, badRequest("kv_transfer_params", "kv_transfer_params: %v", err)
	}
	return in.KV, nil
}

// kvBlocks are the ids of the blocks that hold prompt's KV cache on a prefill
// replica: a run derived from the prompt, so a decode can tell parameters
// made for another prompt.
func kvBlocks(prompt string) []int64 {
	n := (CountTokens(prompt) + kvBlockTokens - 1) / kvBlockTokens
	base := int64(promptHash(prompt)%1_000_000) * 1024
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = base + int64(i)
	}
	return ids
}

// applyKV decides what j's kv_transfer_params make of it, given the replica's
// role, before its prefill: a prefill for a remote decode (kvOut set after
// the answer), a decode of transferred blocks (no prefill, no cache lookup),
// or, for parameters that are stale or for another prompt, a decode of wrong
// blocks (the wrong text).
func (s *Server) applyKV(j *job, kv *kvRequest) {
	if kv == nil || s.cfg.Role == "" || (j.req.kind != chatEndpoint && j.req.kind != completionEndpoint) {
		return // vLLM's hand-off is for chat and completion requests
	}
	role := s.cfg.Role
	if kv.RemoteDecode && !j.req.stream && (role == RolePrefill || role == RoleBoth) {
		j.remoteDecode = true
		return
	}
	if !kv.RemotePrefill || (role != RoleDecode && role != RoleBoth) {
		return
	}
	j.transferred = true
	want := kvBlocks(j.req.prompt)
	fresh := kv.ExpiresAtMS != nil && !s.clock.Now().After(time.UnixMilli(*kv.ExpiresAtMS))
	match := len(kv.BlockIDs) == len(want) && kv.EngineID != nil && kv.Host != nil && kv.Port != nil
	for i := 0; match && i < len(want); i++ {
		match = kv.BlockIDs[i] == want[i]
	}
	if !fresh || !match {
		// The engine reads whatever the named blocks hold now and decodes
		// from it without noticing.
		j.hash = promptHash("stale kv blocks\x00" + j.req.prompt)
		s.log.Debug("decoding from stale or foreign kv blocks", "replica", s.cfg.Name, "id", j.id, "fresh", fresh, "match", match)
	}
}

// kvAnswer is the kv_transfer_params of a prefill for a remote decode, for
// the replica serving at local (the request's local address).
func (s *Server) kvAnswer(j *job, local net.Addr) *kvTransferOut {
	if !j.remoteDecode {
		return nil
	}
	host, port := "127.0.0.1", 0
	if a, ok := local.(*net.TCPAddr); ok {
		host, port = a.IP.String(), a.Port
	}
	return &kvTransferOut{
		RemotePrefill: true,
		BlockIDs:      kvBlocks(j.req.prompt),
		EngineID:      "sim-" + s.idPrefix,
		Host:          host,
		Port:          port,
		TPSize:        1,
		ExpiresAtMS:   s.clock.Now().Add(s.cfg.KVLease).UnixMilli(),
	}
}

// localAddr is the address a request came in on, or nil.
func localAddr(r *http.Request) net.Addr {
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	return a
}

// countPromptSources adds j's prompt tokens to the source counter.
func (s *Server) countPromptSources(j *job) {
	if j.transferred {
		s.kvm.bySource[sourceExternal].Add(float64(j.promptTokens))
		return
	}
	s.kvm.bySource[sourceCacheHit].Add(float64(j.cachedTokens))
	s.kvm.bySource[sourceLocalCompute].Add(float64(j.promptTokens - j.cachedTokens))
}

// decodeStep is the time of one decode step now: DecodePerToken stretched by
// the prefills running on the replica (Config.PrefillInterference).
func (s *Server) decodeStep() time.Duration {
	if s.cfg.PrefillInterference == 0 {
		return s.cfg.DecodePerToken
	}
	return scale(s.cfg.DecodePerToken, 1+s.cfg.PrefillInterference*float64(s.prefilling.Load()))
}

// kvMetrics are the hand-off's series, under vLLM's names.
type kvMetrics struct {
	bySource map[string]prometheus.Counter
}

func newKVMetrics(reg prometheus.Registerer, model string) *kvMetrics {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vllm:prompt_tokens_by_source_total", ConstLabels: prometheus.Labels{"model_name": model},
		Help: "Prompt tokens by where their KV came from: local_compute (prefilled here), local_cache_hit (prefix cache), external_kv_transfer (fetched from a prefill replica).",
	}, []string{"source"})
	reg.MustRegister(v)
	m := &kvMetrics{bySource: map[string]prometheus.Counter{}}
	for _, src := range []string{sourceLocalCompute, sourceCacheHit, sourceExternal} {
		m.bySource[src] = v.WithLabelValues(src)
	}
	return m
}

// validateRole checks Role and KVLease, naming them from path.
func (c Config) validateRole(path string) error {
	var errs []error
	switch c.Role {
	case "", RolePrefill, RoleDecode, RoleBoth:
	default:
		errs = append(errs, fmt.Errorf("%s.role: must be empty (no KV connector), %s, %s or %s, got %q", path, RolePrefill, RoleDecode, RoleBoth, c.Role))
	}
	if !(c.PrefillInterference >= 0) || math.IsInf(c.PrefillInterference, 1) {
		errs = append(errs, fmt.Errorf("%s.prefill_interference: must be a finite number >= 0, got %v", path, c.PrefillInterference))
	}
	if c.KVLease <= 0 {
		errs = append(errs, fmt.Errorf("%s.kv_lease: must be > 0, got %s", path, c.KVLease))
	}
	return errors.Join(errs...)
}

// ListenLocalPD is ListenLocal for a disaggregated pool: prefill replicas of
// cfg with Role prefill, named "<cfg.Name>-prefill-<i>", then n-prefill with
// Role decode, "<cfg.Name>-decode-<i>", seeded apart. With prefill 0 it is
// ListenLocal. Roles returns each replica's role, in the order of Replicas.
func ListenLocalPD(cfg Config, n, prefill int, log *slog.Logger) (*Local, error) {
	if prefill <= 0 {
		return ListenLocal(cfg, n, log)
	}
	if prefill >= n {
		return nil, fmt.Errorf("sim: %d prefill replicas of %d leave none to decode", prefill, n)
	}
	pc, dc := cfg, cfg
	pc.Name, pc.Role = cfg.Name+"-prefill", RolePrefill
	dc.Name, dc.Role, dc.Seed = cfg.Name+"-decode", RoleDecode, cfg.Seed+uint64(prefill)
	if cfg.KVEventsEndpoint != "" {
		// The decode replicas publish on the ports after the prefill replicas'.
		var err error
		if dc.KVEventsEndpoint, err = offsetPort(cfg.KVEventsEndpoint, prefill); err != nil {
			return nil, fmt.Errorf("sim: %w", err)
		}
	}
	pl, err := ListenLocal(pc, prefill, log)
	if err != nil {
		return nil, err
	}
	dl, err := ListenLocal(dc, n-prefill, log)
	if err != nil {
		pl.Close()
		return nil, err
	}
	pl.servers = append(pl.servers, dl.servers...)
	pl.lns = append(pl.lns, dl.lns...)
	pl.ids = append(pl.ids, dl.ids...)
	return pl, nil
}

// Roles returns each replica's Role, in the order of Replicas ("" for a
// replica without one).
func (l *Local) Roles() []string {
	out := make([]string, len(l.servers))
	for i, s := range l.servers {
		out[i] = s.cfg.Role
	}
	return out
}

// setKVHeader names, on an answer decoded from transferred blocks, how many
// prompt tokens came from the prefill replica (HeaderKVTransferTokens).
func setKVHeader(w http.ResponseWriter, j *job) {
	if j.transferred {
		w.Header().Set(HeaderKVTransferTokens, strconv.Itoa(j.promptTokens))
	}
}
