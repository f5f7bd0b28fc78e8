package router

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/triage-gw/triage/upstream"
)

// Fallbacks: where a routed request goes when its classification cannot be had in time.
const (
	// FallbackFast sends it to the fast pool.
	FallbackFast = "fast"
	// FallbackSlow sends it to the slow pool, if it wins a slow-path slot (else fast, as
	// slow_saturated) and the slow pool is healthy (else fast, as slow_unhealthy).
	FallbackSlow = "slow"
	// FallbackReject fails it: 429 for a full queue or a spent budget, the classifier's own
	// error when it is unavailable.
	FallbackReject = "reject"
)

// Unknown-model behaviours.
const (
	// UnknownModelRoute classifies and routes a request naming a model no pool serves, as
	// if it had named "auto".
	UnknownModelRoute = "route"
	// UnknownModelReject refuses it (the HTTP layer answers OpenAI's 404 model_not_found).
	UnknownModelReject = "reject"
)

// maxClassifyBudget bounds routing.classify_budget: beyond it the budget bounds nothing a
// client would wait for.
const maxClassifyBudget = time.Minute

// RoutingConfig is how a routed request relates to its classification and to the model
// name it asks for. In the gateway's YAML it is the top-level section routing.
type RoutingConfig struct {
	// ClassifyBudget is the longest a routed request (chat, completions, query-process)
	// waits for the encoder (batcher queue and inference). A text that would not be done
	// within the budget (the running batch's rest, the texts queued ahead and its own
	// inference, at the recent time per text) is not queued (classifier_busy, at once); at an
	// idle batcher, one slower than the budget is taken only as a probe, once a second, to
	// keep the estimate current. When the budget runs out the request is decided on the
	// cascade's first-stage score, or without one routed by Fallback (classifier_timeout) and its classification, not
	// cancelled, fills the result cache, so the next identical text is decided by the model.
	// 0 waits as long as the request may (server.request_timeout) and leaves admission to
	// batcher.max_queue_delay. /v1/classify never has a budget. Default 50ms.
	ClassifyBudget time.Duration `yaml:"classify_budget"`
	// Fallback routes a request whose classification ran out of budget, found the batcher
	// queue full or the classifier unavailable: "fast", "slow" or "reject". Default "fast".
	Fallback string `yaml:"fallback"`
	// ModelAliases are the model names that mean "classify and route" (the virtual model),
	// listed first by GET /v1/models. Default ["auto"].
	ModelAliases []string `yaml:"model_aliases"`
	// UnknownModel is what a model name that is neither an alias nor served by exactly
	// one pool gets: "route" (classified and routed like an alias) or "reject" (404
	// model_not_found). Default "route".
	UnknownModel string `yaml:"unknown_model"`
}

// DefaultRoutingConfig returns a 50ms classification budget with the fast pool as fallback,
// "auto" as the routed model and unknown names routed.
func DefaultRoutingConfig() RoutingConfig {
	return RoutingConfig{
		ClassifyBudget: 50 * time.Millisecond,
		Fallback:       FallbackFast,
		ModelAliases:   []string{"auto"},
		UnknownModel:   UnknownModelRoute,
	}
}

// ValidateAt reports every invalid field, each named from path ("routing").
func (c RoutingConfig) ValidateAt(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}
	if c.ClassifyBudget < 0 || c.ClassifyBudget > maxClassifyBudget {
		bad("classify_budget", "must be in [0s, %s] (0s: no budget), got %s", maxClassifyBudget, c.ClassifyBudget)
	}
	switch c.Fallback {
	case FallbackFast, FallbackSlow, FallbackReject:
	default:
		bad("fallback", "must be fast, slow or reject, got %q", c.Fallback)
	}
	switch c.UnknownModel {
	case UnknownModelRoute, UnknownModelReject:
	default:
		bad("unknown_model", "must be route or reject, got %q", c.UnknownModel)
	}
	if len(c.ModelAliases) == 0 {
		bad("model_aliases", "must name at least one model (the routed virtual model, usually auto)")
	}
	for i, a := range c.ModelAliases {
		switch {
		case strings.TrimSpace(a) != a || a == "":
			bad(fmt.Sprintf("model_aliases[%d]", i), "must be a non-empty name without surrounding spaces, got %q", a)
		case slices.Index(c.ModelAliases, a) < i:
			bad(fmt.Sprintf("model_aliases[%d]", i), "%q is listed twice", a)
		}
	}
	return errors.Join(errs...)
}

// Target is what a request's model name asks of the router.
type Target int

const (
	// TargetRoute: classify and decide (an alias such as "auto", no model, a name both pools
	// serve, or an unknown name under unknown_model: route).
	TargetRoute Target = iota
	// TargetFast and TargetSlow: the name is served by that pool only; the request is
	// pinned to it without classification.
	TargetFast
	TargetSlow
	// TargetUnknown: no pool serves the name and unknown_model is reject.
	TargetUnknown
)

// modelNames maps each model name to the pools that serve it.
type modelNames struct {
	aliases []string
	unknown string
	pinned  map[string]Target // names exactly one pool serves
	served  []ServedModel     // every name, fast pool's first, in replica order
}

// ServedModel is a model name a pool serves, as GET /v1/models lists it.
type ServedModel struct {
	Name string
	// Pool is the serving pool's name; "" for a name both pools serve.
	Pool string
}

// newModelNames reads the model names the pools' replicas are configured with. An alias that
// a pool also serves stays an alias (routed): config validation refuses that combination
// before it gets here.
func newModelNames(cfg RoutingConfig, fast, slow *upstream.Pool) modelNames {
	n := modelNames{aliases: cfg.ModelAliases, unknown: cfg.UnknownModel, pinned: map[string]Target{}}
	owner := map[string]int{} // index into served
	for _, p := range []struct {
		pool *upstream.Pool
		t    Target
	}{{fast, TargetFast}, {slow, TargetSlow}} {
		for _, r := range p.pool.Replicas() {
			if r.Model == "" || slices.Contains(n.aliases, r.Model) {
				continue
			}
			i, seen := owner[r.Model]
			switch {
			case !seen:
				owner[r.Model] = len(n.served)
				n.served = append(n.served, ServedModel{Name: r.Model, Pool: p.pool.Name()})
				n.pinned[r.Model] = p.t
			case n.pinned[r.Model] != p.t:
				n.served[i].Pool = ""
				delete(n.pinned, r.Model)
			}
		}
	}
	return n
}

// Target says what model asks for: "" (no model), an alias or a name both pools serve is
// routed; a name one pool serves pins; anything else follows routing.unknown_model. Names
// match exactly, case included, as a replica matches them.
func (r *Router) Target(model string) Target {
	if t, ok := r.names.pinned[model]; ok {
		return t
	}
	if model == "" || slices.Contains(r.names.aliases, model) || r.served(model) || r.names.unknown == UnknownModelRoute {
		return TargetRoute
	}
	return TargetUnknown
}

// served reports whether some pool serves model (pinned or shared by both).
func (r *Router) served(model string) bool {
	return slices.ContainsFunc(r.names.served, func(m ServedModel) bool { return m.Name == model })
}

// Aliases returns the routed virtual model names, in configured order.
func (r *Router) Aliases() []string { return slices.Clone(r.names.aliases) }

// Served returns the model names the pools serve, the fast pool's first.
func (r *Router) Served() []ServedModel { return slices.Clone(r.names.served) }
