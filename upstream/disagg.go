package upstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/triage-gw/triage/upstream/policy"
)

// Prefill/decode disaggregation (AIBrix's pd router, llm-d's P/D sidecar) with
// vLLM's NIXL hand-off:
//
//  1. the prefill leg: the client's body, not streamed, max_tokens 1, with
//     kv_transfer_params {"do_remote_decode": true, ...}, to a prefill replica
//     picked by DisaggregationConfig.PrefillPolicy (prefix-cache: where the
//     prompt's prefix most likely is, else the least loaded), within
//     LegDeadline;
//  2. its answer carries a top-level kv_transfer_params object: where the
//     engine keeps the prompt's KV blocks for a remote decode;
//  3. the decode leg: the client's body (streamed if it asked) with that
//     object unchanged as its kv_transfer_params, to a decode or both
//     replica picked by DecodePolicy; its answer is the client's.
//
// A decode leg is never sent twice with the same parameters: the blocks it
// names are the prefill replica's to free once read (or once the engine's
// lease ends, after which a decode reads whatever replaced them and answers
// 200 with wrong text). So every failure before the decode leg has started
// (no prefill replica, a prefill that fails, answers without parameters or
// takes longer than LegDeadline; a decode leg that fails as the pool's retry
// rule lists, which by default is only what cannot have run) runs the request
// whole on a decode or both replica, without parameters, as a pool that is
// not disaggregated would. Once the decode leg has answered, its answer is
// passed on as any answer is.

// FallbackReason says why a request of a disaggregated pool ran whole on one
// replica: the values of triage_upstream_pd_fallbacks_total's reason label
// and of the x-router-pd-fallback header.
type FallbackReason string

const (
	// FallbackNoPrefillReplica: no prefill replica could take the request
	// (none healthy, or all at max_in_flight_per_replica).
	FallbackNoPrefillReplica FallbackReason = "no_prefill_replica"
	// FallbackPrefillError: the prefill leg failed: no connection, a broken
	// answer, a status other than 2xx.
	FallbackPrefillError FallbackReason = "prefill_error"
	// FallbackPrefillNoParams: the prefill answered 2xx without a
	// kv_transfer_params object (an engine without a KV connector, or a
	// misconfigured one).
	FallbackPrefillNoParams FallbackReason = "prefill_no_params"
	// FallbackPrefillDeadline: the prefill leg took longer than
	// disaggregation.leg_deadline.
	FallbackPrefillDeadline FallbackReason = "prefill_deadline"
	// FallbackDecodeFailed: the decode leg failed in a way the pool's retry
	// rule lists (by default: it could not have started).
	FallbackDecodeFailed FallbackReason = "decode_failed"
)

var fallbackReasons = []FallbackReason{
	FallbackNoPrefillReplica, FallbackPrefillError, FallbackPrefillNoParams, FallbackPrefillDeadline, FallbackDecodeFailed,
}

// PrefillLeg is the prefill leg of a disaggregated request.
type PrefillLeg struct {
	// ReplicaID names the prefill replica.
	ReplicaID string
	// Duration runs from sending the prefill request to holding its transfer
	// parameters, or to its failure.
	Duration time.Duration
}

// errLegDeadline is the cause of a prefill leg's context that ran past
// disaggregation.leg_deadline.
var errLegDeadline = errors.New("prefill leg deadline")

// maxPrefillAnswer bounds how much of a prefill answer is read: one token and
// its transfer parameters.
const maxPrefillAnswer = 1 << 20

// chooser is a policy and the replicas it picks among: the pool's own policy
// over the replicas that take whole requests, or a disaggregated pool's
// prefill or decode policy.
type chooser struct {
	picker   policy.Picker
	finisher policy.Finisher     // picker as a policy.Finisher, or nil
	ttfts    policy.TTFTObserver // picker as a policy.TTFTObserver, or nil
	prefill  bool                // picks among prefill replicas; else among decode and both
}

func newChooser(pk policy.Picker, prefill bool) chooser {
	ch := chooser{picker: pk, prefill: prefill}
	ch.finisher, _ = pk.(policy.Finisher)
	ch.ttfts, _ = pk.(policy.TTFTObserver)
	return ch
}

// takes reports whether r is among the replicas ch picks from.
func (ch *chooser) takes(r *replica) bool { return (r.role == RolePrefill) == ch.prefill }

// disagg is a disaggregated pool's hand-off: its two leg policies and metrics.
// Read-only after newDisagg; the pickers guard their own state.
type disagg struct {
	cfg             DisaggregationConfig
	prefill, decode chooser
	m               pdMetrics
}

// newDisagg builds the hand-off of a pool with prefill replicas, nil for any
// other pool. The leg policies are built from the pool's policy sections.
func newDisagg(cfg PoolConfig, m *metrics, reg prometheus.Registerer, now func() time.Time) (*disagg, error) {
	if !cfg.disaggregated() {
		return nil, nil
	}
	evictions := m.evictions.MustCurryWith(prometheus.Labels{"pool": cfg.Name})
	env := policy.Env{Now: now, Evicted: func(table string, n int) { evictions.WithLabelValues(table).Add(float64(n)) }}
	build := func(field, name string) (policy.Picker, error) {
		pc := cfg.Policy
		pc.Name = name
		pk, err := policy.New(pc, env)
		if err != nil {
			return nil, fmt.Errorf("disaggregation.%s: %w", field, err)
		}
		return pk, nil
	}
	pre, err := build("prefill_policy", cfg.Disaggregation.PrefillPolicy)
	if err != nil {
		return nil, err
	}
	dec, err := build("decode_policy", cfg.Disaggregation.DecodePolicy)
	if err != nil {
		return nil, err
	}
	pm, err := newPDMetrics(reg, cfg.Name)
	if err != nil {
		return nil, err
	}
	return &disagg{cfg: cfg.Disaggregation, prefill: newChooser(pre, true), decode: newChooser(dec, false), m: pm}, nil
}

// applies reports whether fr is a request the hand-off splits: a chat or
// completion request. Anything else runs whole.
func (d *disagg) applies(fr *ForwardRequest) bool {
	return fr.Method == http.MethodPost && (fr.Path == "/v1/chat/completions" || fr.Path == "/v1/completions")
}

// legRequest is fr with another body, and that body's model document when fr
// asks for the model to be set.
func legRequest(fr *ForwardRequest, body []byte) (*ForwardRequest, *modelDoc, error) {
	leg := *fr
	leg.Body = body
	if !fr.SetModel {
		return &leg, nil, nil
	}
	doc, err := parseModelDoc(body)
	return &leg, doc, err
}

// doDisagg runs fr (admitted, its body a JSON object when doc is set) through
// the hand-off: see the comment at the top of this file.
func (p *Pool) doDisagg(ctx context.Context, fr *ForwardRequest, doc *modelDoc) (*Response, error) {
	ms, err := members(fr.Body)
	if err != nil {
		// Not an object: nothing to split. The replica answers it (400).
		r, load, err := p.acquire(&fr.Routing, nil)
		if err != nil {
			return nil, err
		}
		return p.doWhole(ctx, fr, doc, r, load, nil)
	}
	whole, wdoc, err := legRequest(fr, wholeBody(ms))
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
	}
	params, leg, reason, err := p.prefillLeg(ctx, fr, ms)
	if err != nil {
		return nil, err
	}
	if reason != "" {
		return p.fallBack(ctx, whole, wdoc, reason, leg, nil, 0, nil)
	}

	dfr, ddoc, err := legRequest(fr, decodeBody(ms, params))
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
	}
	r, load, err := p.acquireBy(&p.pd.decode, &dfr.Routing, nil)
	if err != nil {
		p.pd.m.legs[legDecode][legNoReplica].Inc()
		return nil, err
	}
	a := p.sendBy(ctx, &p.pd.decode, dfr, ddoc, r, load)
	if a.resp != nil {
		p.pd.m.legTime[legDecode].Observe(a.ttfb.Seconds())
	}
	if a.ended != tryAnswered && p.retry.on[a.ended] && ctx.Err() == nil {
		// The decode did not start (or failed as the retry rule lists): the
		// parameters are spent. Run the request whole elsewhere, without them.
		if wr, wload, err := p.acquire(&whole.Routing, []string{r.id}); err == nil {
			p.log.Warn("decode leg failed; running the request whole", "replica", r.id, "next_replica", wr.id,
				"prefill_replica", leg.ReplicaID, "failure", a.ended.String(), "err", a.reason())
			a.discard()
			p.pd.m.legs[legDecode][legError].Inc()
			return p.fallBack(ctx, whole, wdoc, FallbackDecodeFailed, leg, wr, wload, []string{r.id})
		}
	}
	switch {
	case ctx.Err() != nil:
		p.pd.m.legs[legDecode][legCanceled].Inc()
	case a.resp == nil:
		p.pd.m.legs[legDecode][legError].Inc()
	default:
		p.pd.m.legs[legDecode][legOK].Inc()
	}
	resp, err := a.result(false)
	if resp != nil {
		resp.Prefill = leg
	}
	return resp, err
}

// fallBack runs whole (fr without transfer parameters) on r, acquired for it
// with load its in-flight count, or on a replica the pool's policy picks when
// r is nil, never on those in avoid; the response says why and which prefill
// leg was tried.
func (p *Pool) fallBack(ctx context.Context, whole *ForwardRequest, doc *modelDoc, reason FallbackReason, leg *PrefillLeg,
	r *replica, load int, avoid []string) (*Response, error) {
	p.pd.m.fallbacks[reason].Inc()
	if r == nil {
		var err error
		if r, load, err = p.acquire(&whole.Routing, avoid); err != nil {
			return nil, err
		}
	}
	resp, err := p.doWhole(ctx, whole, doc, r, load, avoid)
	if resp != nil {
		resp.Prefill, resp.Fallback = leg, reason
	}
	return resp, err
}

// prefillLeg runs the prefill leg of the request whose body has the members
// ms and returns the engine's transfer parameters, or the reason to run the
// request whole instead. Its error is the caller's own going away. leg is nil
// when no prefill replica was picked.
func (p *Pool) prefillLeg(ctx context.Context, fr *ForwardRequest, ms []member) (params json.RawMessage, leg *PrefillLeg, reason FallbackReason, err error) {
	pfr, pdoc, err := legRequest(fr, prefillBody(ms))
	if err != nil {
		return nil, nil, FallbackPrefillError, nil
	}
	pfr.Header = fr.Header.Clone()
	if pfr.Header == nil {
		pfr.Header = make(http.Header)
	}
	pfr.Header.Set("Accept", "application/json")
	r, load, err := p.acquireBy(&p.pd.prefill, &pfr.Routing, nil)
	if err != nil {
		p.pd.m.legs[legPrefill][legNoReplica].Inc()
		return nil, nil, FallbackNoPrefillReplica, nil
	}
	leg = &PrefillLeg{ReplicaID: r.id}
	lctx, cancel := context.WithTimeoutCause(ctx, p.pd.cfg.LegDeadline.Std(), errLegDeadline)
	defer cancel()
	start := time.Now()
	a := p.sendBy(lctx, &p.pd.prefill, pfr, pdoc, r, load)
	a.unpriced = true // the decode leg's usage is the request's: prompt and output
	resp, err := a.result(false)
	var answer []byte
	if err == nil {
		if resp.Status >= 200 && resp.Status < 300 {
			answer, err = io.ReadAll(io.LimitReader(resp.Body, maxPrefillAnswer))
		}
		resp.Body.Close() // the replica's part is done: its blocks wait for the decode
	}
	leg.Duration = time.Since(start)
	p.pd.m.legTime[legPrefill].Observe(leg.Duration.Seconds())
	if err == nil && resp.Status >= 200 && resp.Status < 300 {
		if params, ok := kvParams(answer); ok {
			p.pd.m.legs[legPrefill][legOK].Inc()
			return params, leg, "", nil
		}
		p.pd.m.legs[legPrefill][legNoParams].Inc()
		p.log.Warn("prefill answered without kv_transfer_params; running the request whole", "replica", r.id)
		return nil, leg, FallbackPrefillNoParams, nil
	}
	switch {
	case ctx.Err() != nil:
		p.pd.m.legs[legPrefill][legCanceled].Inc()
		return nil, leg, "", fmt.Errorf("pool %s: %w", p.cfg.Name, ctx.Err())
	case context.Cause(lctx) == errLegDeadline:
		p.observe(r, false) // a replica this slow is failing, as one that times out is
		p.pd.m.legs[legPrefill][legDeadline].Inc()
		p.log.Warn("prefill leg past its deadline; running the request whole", "replica", r.id,
			"leg_deadline", p.pd.cfg.LegDeadline.String())
		return nil, leg, FallbackPrefillDeadline, nil
	}
	p.pd.m.legs[legPrefill][legError].Inc()
	var why string
	if err != nil {
		why = err.Error()
	} else {
		why = fmt.Sprintf("status %d", resp.Status)
	}
	p.log.Warn("prefill leg failed; running the request whole", "replica", r.id, "err", why)
	return nil, leg, FallbackPrefillError, nil
}

// PrefillTracer returns the decision tracer of a disaggregated pool's prefill
// policy (see Tracer); nil when tracing is off or the pool is not
// disaggregated.
func (p *Pool) PrefillTracer() *policy.Tracer {
	return p.legTracer(func(d *disagg) policy.Picker { return d.prefill.picker })
}

// DecodeTracer is PrefillTracer for the decode policy.
func (p *Pool) DecodeTracer() *policy.Tracer {
	return p.legTracer(func(d *disagg) policy.Picker { return d.decode.picker })
}

func (p *Pool) legTracer(leg func(*disagg) policy.Picker) *policy.Tracer {
	if p.pd == nil {
		return nil
	}
	if t, ok := leg(p.pd).(policy.Traceable); ok {
		return t.Tracer()
	}
	return nil
}
