package server

import (
	"fmt"
	"strconv"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// Headers of an answer from a disaggregated pool (see upstream.DisaggregationConfig). The
// decode replica is x-router-replica, as the replica that answered always is.
const (
	// HeaderPrefillReplica names the replica that ran the prefill leg, or was tried for it.
	HeaderPrefillReplica = "x-router-prefill-replica"
	// HeaderPDFallback says why the request ran whole on one replica instead
	// (upstream.FallbackReason).
	HeaderPDFallback = "x-router-pd-fallback"
)

// setDisaggHeaders names both legs' replicas and adds their times to Server-Timing: prefill
// (sending it to holding the engine's transfer parameters) and decode (sending it to its
// response headers). A request that ran whole says why.
func setDisaggHeaders(c *fiber.Ctx, resp *upstream.Response) {
	if resp.Fallback != "" {
		c.Set(HeaderPDFallback, string(resp.Fallback))
	}
	leg := resp.Prefill
	if leg == nil {
		return
	}
	c.Set(HeaderPrefillReplica, leg.ReplicaID)
	c.Append(fiber.HeaderServerTiming, fmt.Sprintf("prefill;desc=%s;dur=%s", strconv.Quote(leg.ReplicaID), millis(leg.Duration)))
	if resp.Fallback != "" {
		return
	}
	c.Append(fiber.HeaderServerTiming, fmt.Sprintf("decode;desc=%s;dur=%s", strconv.Quote(resp.ReplicaID), millis(resp.TTFB)))
}

// legTrace is one leg policy's latest decisions in GET /admin/trace.
type legTrace struct {
	Policy  string               `json:"policy"`
	Records []policy.TraceRecord `json:"records"`
}

// legTraces returns a disaggregated pool's prefill and decode decisions, up to limit each; nil
// for a pool that is not disaggregated or traces nothing.
func legTraces(p *upstream.Pool, d upstream.DisaggregationConfig, limit int) (prefill, decode *legTrace) {
	leg := func(name string, tr *policy.Tracer) *legTrace {
		if tr == nil {
			return nil
		}
		records := tr.Recent(min(limit, tr.Capacity()))
		if records == nil {
			records = []policy.TraceRecord{}
		}
		return &legTrace{Policy: name, Records: records}
	}
	return leg(d.PrefillPolicy, p.PrefillTracer()), leg(d.DecodePolicy, p.DecodeTracer())
}
