package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/triage-gw/triage/upstream/policy"
)

// ErrReplicaUnavailable is wrapped by DoOn's error when the named replica exists but may not
// take the request now: ejected, failing its health checks, at max_in_flight_per_replica, or
// not reachable (no connection could be opened: nothing was sent).
// It wraps ErrNoHealthyReplica, so it maps like any unavailable pool.
var ErrReplicaUnavailable = fmt.Errorf("replica unavailable: %w", ErrNoHealthyReplica)

// DoOn is Do on one named replica: the request of a stateful API (an OpenAI Responses
// continuation) whose state lives on that replica only. It is admitted and accounted like
// any request and the picker sees a pick among one candidate; it is never retried on
// another replica, which would not hold the state. A draining replica still takes it:
// draining means finishing what a replica holds, and a conversation it stores is that.
//
// Errors: those of Do, ErrUnknownReplica for an id the pool does not have, and
// ErrReplicaUnavailable when the replica cannot take it now. A dial error wraps both the
// *UpstreamError and ErrReplicaUnavailable: a replica that died since it stored a response is
// first met this way, before the failure ejects it.
func (p *Pool) DoOn(ctx context.Context, replicaID string, fr *ForwardRequest) (*Response, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
	}
	if !strings.HasPrefix(fr.Path, "/") {
		return nil, fmt.Errorf("pool %s: path %q must start with \"/\"", p.cfg.Name, fr.Path)
	}
	if fr.Method != "" && !validHeaderName(fr.Method) {
		return nil, fmt.Errorf("pool %s: %w: invalid method %q", p.cfg.Name, ErrInvalidRequest, fr.Method)
	}
	if err := checkHeaders(fr.Header); err != nil {
		return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
	}
	var doc *modelDoc
	if fr.SetModel {
		d, err := parseModelDoc(fr.Body)
		if err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
		}
		doc = d
	}
	req := &fr.Routing
	if p.admitter != nil {
		if err := p.admitter.Admit(req); err != nil {
			return nil, fmt.Errorf("pool %s: %w", p.cfg.Name, err)
		}
	}
	r, load, err := p.acquireOn(req, replicaID)
	if err != nil {
		return nil, err
	}
	resp, err := p.send(ctx, fr, doc, r, load).result(false)
	if err != nil && isDialError(err) {
		return nil, fmt.Errorf("%w: %w", ErrReplicaUnavailable, err)
	}
	return resp, err
}

// acquireOn charges replica id for one request, as acquire does for the picker's choice.
func (p *Pool) acquireOn(req *policy.Request, id string) (*replica, int, error) {
	var r *replica
	for _, c := range p.replicas {
		if c.id == id {
			r = c
			break
		}
	}
	if r == nil {
		return nil, 0, fmt.Errorf("pool %s: %w %q", p.cfg.Name, ErrUnknownReplica, id)
	}
	now := p.now()
	r.mu.Lock()
	ok := !r.checkFailing && !now.Before(r.ejectedUntil)
	r.mu.Unlock()
	limit := p.cfg.MaxInFlightPerReplica
	if !ok || !r.tryAcquire(limit) {
		return nil, 0, fmt.Errorf("pool %s: replica %s: %w", p.cfg.Name, id, ErrReplicaUnavailable)
	}
	c := r.candidate(now, p.staleAfter())
	if p.remote != nil {
		c.InFlight += p.remote.RemoteInFlight(p.cfg.Name)[r.id]
	}
	// The picker learns of the request (its Done follows at release) though it had no choice.
	if i := p.picker.Pick(req, []policy.Candidate{c}); i != 0 {
		r.inFlight.Add(-1)
		return nil, 0, errors.New("pool " + p.cfg.Name + ": picker refused the only candidate")
	}
	r.metrics.inflight.Inc()
	p.publishPick(&p.whole, req, r)
	return r, c.InFlight, nil
}
