package upstream

import "github.com/triage-gw/triage/upstream/policy"

// PickPublisher hands this gateway's picks to the other gateways of a fleet, whose copies of
// the pool's policy learn them (policy.Sharer). Package fleet implements it.
type PickPublisher interface {
	// PublishPick is called once per request charged to a replica, after the pick, with what
	// the policy shares about it. It must not block or fail the request: an implementation
	// that cannot publish now drops the observation.
	PublishPick(pool string, o policy.Observation)
}

// RemoteLoad is the other gateways' view of a fleet's load. Package fleet implements it.
type RemoteLoad interface {
	// RemoteInFlight returns, per replica ID of the named pool, the requests the other
	// gateways have in flight as of their latest snapshots; nil when none is known (no other
	// gateway, or the fleet's Redis is down). The pool only reads the map; the implementation
	// must not change it after returning it.
	RemoteInFlight(pool string) map[string]int
}

// InFlightByReplica returns this gateway's requests in flight per replica ID (replicas with
// none included), which fleet mode publishes to the other gateways.
func (p *Pool) InFlightByReplica() map[string]int {
	out := make(map[string]int, len(p.replicas))
	for _, r := range p.replicas {
		out[r.id] = int(r.inFlight.Load())
	}
	return out
}

// ObservePick applies a pick another gateway of the fleet made in this pool to the policy
// that picks among its replica's kind (a disaggregated pool's prefill policy for a prefill
// replica, else the pool's policy), when that policy learns from other gateways
// (policy.Sharer) and the replica is one of this pool's. It reports whether the policy used
// it.
func (p *Pool) ObservePick(o policy.Observation) bool {
	r, ok := p.byID[o.ReplicaID]
	if !ok {
		return false // another gateway's config names a replica this one does not have
	}
	sharer := p.sharer
	if r.role == RolePrefill && p.pd != nil {
		sharer, _ = p.pd.prefill.picker.(policy.Sharer)
	}
	if sharer == nil {
		return false
	}
	return sharer.Observe(o)
}

// publishPick shares a pick that ch's policy made and that was charged to r.
func (p *Pool) publishPick(ch *chooser, req *policy.Request, r *replica) {
	if p.picks == nil {
		return
	}
	sharer, _ := ch.picker.(policy.Sharer)
	if sharer == nil {
		return
	}
	if o, ok := sharer.Share(req, r.id); ok {
		p.picks.PublishPick(p.cfg.Name, o)
	}
}
