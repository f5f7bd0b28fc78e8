package decision

// Reason says why a request went the way it did. Values are a small fixed set (see the package
// documentation) and are safe as metric label values.
type Reason string

// Reasons set by a Policy.
const (
	ReasonSlowGranted  Reason = "slow_granted"
	ReasonFastModel    Reason = "fast_model"
	ReasonLoadShedding Reason = "load_shedding"
	ReasonGreyZoneFast Reason = "grey_zone_fast"
	ReasonGreyZoneSlow Reason = "grey_zone_slow"
	// ReasonShareShedding: the policy's own rule said slow, but P(slow) is at or below the
	// slow-share cap's floor (State.ShareFloor). Its value keeps the name the cap had when
	// it was called a budget: clients and dashboards match on x-router-reason.
	ReasonShareShedding Reason = "budget_shedding"
)

// Reasons set by the request pipeline (package router) after a Policy said slow.
const (
	// ReasonSlowSaturated: the slow-path Semaphore was full, so the request was shed to fast.
	ReasonSlowSaturated Reason = "slow_saturated"
	// ReasonSlowUnhealthy: the slow pool had no healthy replica, so the request went fast.
	ReasonSlowUnhealthy Reason = "slow_unhealthy"
)

// Reasons set by the request pipeline when no Policy decided.
const (
	// ReasonPinned: the request named a model that one pool serves and went there unclassified.
	ReasonPinned Reason = "pinned"
	// ReasonClassifierTimeout: the classification did not come within the request's budget;
	// the configured fallback pool took it.
	ReasonClassifierTimeout Reason = "classifier_timeout"
	// ReasonClassifierBusy: the classifier's queue was full; the fallback pool took it.
	ReasonClassifierBusy Reason = "classifier_busy"
	// ReasonClassifierUnavailable: the classifier failed (no model, shutting down, a failed
	// batch); the fallback pool took it.
	ReasonClassifierUnavailable Reason = "classifier_unavailable"
	// ReasonNoText: the request had no text to classify (its user turns hold only images,
	// audio or files); the fallback pool took it.
	ReasonNoText Reason = "no_text"
)

// State is the load snapshot a decision is made under.
type State struct {
	// SlowActive is the number of requests holding the slow-path semaphore (Semaphore.Active).
	SlowActive int
	// SlowMax is the semaphore's capacity (Semaphore.Max).
	SlowMax int
	// QueueLen is the number of distinct texts waiting in the classifier's batcher.
	QueueLen int
	// ShareFloor is the slow-share cap's floor (ShareCap.Threshold): a request
	// goes slow only with P(slow) above it, whatever the policy's own rule says. 0: none.
	ShareFloor float64
}

// Load returns SlowActive/SlowMax limited to [0, 1]. A State with SlowMax ≤ 0 has no slow
// capacity at all and reports full load.
func (s State) Load() float64 {
	if s.SlowMax <= 0 {
		return 1
	}
	l := float64(s.SlowActive) / float64(s.SlowMax)
	switch {
	case l < 0:
		return 0
	case l > 1:
		return 1
	}
	return l
}

// Decision is the outcome of a Policy.
type Decision struct {
	// Slow reports whether the request should take the slow path (subject to the semaphore).
	Slow bool
	// Reason explains Slow.
	Reason Reason
	// Threshold is the P(slow) a request had to exceed to go slow under this State: the
	// larger of its two parts below.
	Threshold float64
	// LoadThreshold is the policy's own threshold (quadratic: base + alpha·load²; grey-zone:
	// the model's cutoff).
	LoadThreshold float64
	// ShareFloor is the slow-share cap's floor it was decided under (0: none).
	ShareFloor float64
	// Load is State.Load() at decision time, reported for headers and logs.
	Load float64
}

// Score is the classifier's output for one prompt together with the boundary of the model
// that produced it.
type Score struct {
	// PSlow is P(slow | prompt) in [0, 1].
	PSlow float64
	// Cutoff is the model's own label boundary (its manifest's label_threshold): the model
	// says slow iff PSlow > Cutoff. It comes with the score because it belongs to the model,
	// which a reload may replace.
	Cutoff float64
}

// ModelSlow reports whether the model's own label is slow. NaN is never slow.
func (s Score) ModelSlow() bool { return s.PSlow > s.Cutoff }

// Policy decides fast or slow from the classifier's score and the current load.
//
// Decide must be pure, safe for concurrent use and allocation-free: it runs on every request,
// cache hits included (a cached P(slow) is re-decided under the current load).
type Policy interface {
	Decide(s Score, st State) Decision
}

// modelDecision is the decision the classifier's label alone would make.
func modelDecision(s Score, load float64) Decision {
	if s.ModelSlow() {
		return Decision{Slow: true, Reason: ReasonSlowGranted, Threshold: s.Cutoff, Load: load}
	}
	return Decision{Slow: false, Reason: ReasonFastModel, Threshold: s.Cutoff, Load: load}
}

// applyShareCap applies the slow-share cap's floor to d, the policy's own decision: a slow
// verdict at or below the floor becomes fast with reason budget_shedding, and the reported
// threshold is the larger of the two. It works in place: Decide runs on every request.
func (d *Decision) applyShareCap(s Score, st State) {
	d.LoadThreshold, d.ShareFloor = d.Threshold, st.ShareFloor
	if st.ShareFloor > d.Threshold {
		d.Threshold = st.ShareFloor
	}
	if d.Slow && st.ShareFloor > 0 && !(s.PSlow > st.ShareFloor) {
		d.Slow, d.Reason = false, ReasonShareShedding
	}
}
