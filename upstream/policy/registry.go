package policy

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"
)

// Section is one policy's own settings: the YAML mapping under its key in a
// policy config (policy.prefix_cache), decoded into the policy's config
// type.
//
// Contract: a Section is a plain value, copied freely. ValidateAt reports
// every invalid field, each error naming the field from path
// ("pools.fast.policy.prefix_cache.block_chars: must be >= 1, got 0"),
// joined with errors.Join; it never corrects a value. A section that holds
// a map or a slice implements clone (see Config), so that copies of a
// Config share nothing.
type Section interface {
	ValidateAt(path string) error
}

// Env is what a policy may take from the pool that runs it. The zero value
// is usable.
type Env struct {
	// Now tells time: vtc-basic's fairness window and the Tracer's record
	// times. Nil means time.Now.
	Now func() time.Time
	// Evicted is told whenever a policy drops n entries from one of its
	// tables keyed by client-controlled values to stay within the table's
	// bound: table is TableUsers, TableSessions or TablePrefixBlocks. It is
	// called with the policy's lock held, so it must be quick and must not
	// call back into the policy. Nil means evictions are not reported.
	Evicted func(table string, n int)
}

// The tables a policy keeps per client-controlled value, each bounded in
// entries; the values of Env.Evicted's table argument.
const (
	TableUsers        = "users"         // vtc-basic: one fairness window per user
	TableSessions     = "sessions"      // lmetric sticky/unified: session → replica
	TablePrefixBlocks = "prefix_blocks" // prefix-aware policies: block hashes per replica
)

// evictFunc is Env.Evicted or a no-op, so the policies never check for nil.
func evictFunc(env Env) func(string, int) {
	if env.Evicted == nil {
		return func(string, int) {}
	}
	return env.Evicted
}

// spec is one registered policy.
type spec struct {
	name string
	// key is the YAML key of the policy's section, "" when it has none.
	key string
	// defaults returns the section's defaults; nil when key is "".
	defaults func() Section
	// build makes the picker from the config's section (nil when key is "").
	build func(Section, Env) (Picker, error)
}

// The registry, filled by the policies' init functions and read-only after.
var (
	byName = map[string]*spec{}
	byKey  = map[string]*spec{} // only the policies with settings
)

// register adds a policy named name (as written in Config.Name). Each
// policy file calls it from its init function.
//
// key is the YAML key of the policy's own section under the policy config
// ("prefix_cache"), decoded into a C starting from defaults(); build gets
// the configured C. A policy without settings passes key "" and defaults
// nil, and takes noSettings. Policies may share a section only when they
// take the same config type (the SLO family's variants share "slo"): each
// section is decoded and validated once, under its own key.
//
// register panics on an empty or repeated name or key: a mistake in this
// package's init functions that no test run can miss.
func register[C Section](name, key string, defaults func() C, build func(C, Env) (Picker, error)) {
	switch {
	case name == "" || build == nil:
		panic("policy: register needs a name and a build function")
	case byName[name] != nil:
		panic(fmt.Sprintf("policy: %q registered twice", name))
	case key == "name" || key == "trace":
		panic(fmt.Sprintf("policy: %q: section key %q is taken by Config", name, key))
	case key != "" && byKey[key] != nil && reflect.TypeOf(byKey[key].defaults()) != reflect.TypeFor[C]():
		panic(fmt.Sprintf("policy: section %q of %q already belongs to %q", key, name, byKey[key].name))
	case (key == "") != (defaults == nil):
		panic(fmt.Sprintf("policy: %q: a section key needs defaults and defaults need a section key", name))
	}
	s := &spec{name: name, key: key, build: func(sec Section, env Env) (Picker, error) {
		c, _ := sec.(C) // nil for a policy without settings: the zero C
		return build(c, env)
	}}
	if key != "" {
		s.defaults = func() Section { return defaults() }
		if byKey[key] == nil {
			byKey[key] = s
		}
	}
	byName[name] = s
}

// noSettings is the section type of policies that have no settings.
type noSettings struct{}

func (noSettings) ValidateAt(string) error { return nil }

// picker turns a constructor's (*T, error) into (Picker, error) without
// wrapping a nil *T in a non-nil Picker.
func picker[P Picker](p P, err error) (Picker, error) {
	if err != nil {
		return nil, err
	}
	return p, nil
}

// Names lists the registered policy names, sorted.
func Names() []string { return slices.Sorted(maps.Keys(byName)) }

// New validates cfg (errors named from "policy") and builds the policy it
// names from its section, with a Tracer attached when cfg.Trace.Enabled
// (read it through Traceable). Pickers that learn from finished requests
// (least-busy-time, lmetric, prefix-cache-preble, vtc-basic) also implement
// Finisher.
func New(cfg Config, env Env) (Picker, error) {
	if err := cfg.ValidateAt("policy"); err != nil {
		return nil, err
	}
	s := byName[cfg.Name]
	var sec Section
	if s.key != "" {
		sec = cfg.section(s.key)
	}
	p, err := s.build(sec, env)
	if err != nil {
		return nil, fmt.Errorf("policy %s: %w", cfg.Name, err)
	}
	if cfg.Trace.Enabled {
		if t, ok := p.(interface{ SetTracer(*Tracer) }); ok {
			t.SetTracer(NewTracer(cfg.Trace.TopK, cfg.Trace.Capacity, env.Now))
		}
	}
	return p, nil
}
