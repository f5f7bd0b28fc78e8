package policy

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
)

// Config selects and tunes a pool's replica policy: the policy's name, the
// tracing settings, and one section per registered policy that has
// settings, under the policy's YAML key (prefix_cache, lmetric, ...). Every
// section is kept and validated whichever policy is selected, so a config
// stays valid when only the name changes.
//
// Config is a value: copies share nothing mutable. Read a section with
// Section or SectionOf and change it with SetSection. The zero Config has
// no name and reads every section as its defaults; start from
// DefaultConfig.
//
// In YAML (see UnmarshalYAML) a Config is the mapping
//
//	name: prefix-cache
//	prefix_cache: {block_chars: 64}
//	trace: {enabled: true}
//
// with a key per section; the TRIAGE_ environment variables reach the
// sections' scalar fields through SectionKeys, Section and SetSection.
//
// The yaml tags of the fields below name their keys for whoever walks the
// type (package config derives the TRIAGE_ variables from them); YAML itself
// goes through UnmarshalYAML and MarshalYAML.
type Config struct {
	// Name is one of Names(). Default "least-request".
	Name string `yaml:"name"`
	// Trace turns decision tracing on and sizes it.
	Trace TraceConfig `yaml:"trace"`

	// sections holds each section by key, as a value of the type its
	// policy registered. It is never written in place: every change builds
	// a new map, so copying a Config copies its sections. A key missing
	// from it (as in the zero Config) reads as the registered defaults.
	sections map[string]Section
}

// cloner is implemented by sections that hold maps or slices: clone returns
// a copy sharing none of them. Config calls it whenever a section crosses
// its boundary, in or out.
type cloner interface {
	clone() Section
}

func cloneSection(s Section) Section {
	if c, ok := s.(cloner); ok {
		return c.clone()
	}
	return s
}

// DefaultConfig returns least-request with tracing off and every section
// at its defaults. Decode YAML onto it so that omitted fields keep them.
func DefaultConfig() Config {
	return Config{Name: nameLeastRequest, Trace: DefaultTraceConfig(), sections: Config{}.allSections()}
}

// SectionKeys lists the YAML keys of the registered sections, sorted. It
// does not depend on c.
func (Config) SectionKeys() []string { return slices.Sorted(maps.Keys(byKey)) }

// Section returns a copy of the section under key, as a value of the type
// its policy registered (PrefixCacheConfig for "prefix_cache"): c's own
// value, or the registered defaults when c has none. It returns nil for a
// key no policy registered.
func (c Config) Section(key string) any {
	if _, ok := byKey[key]; !ok {
		return nil
	}
	return cloneSection(c.section(key))
}

// SectionOf is Section typed: SectionOf[LMetricConfig](c, "lmetric"). It
// panics when key is not a registered section of type C, as a failed type
// assertion would: that is a mistake in the caller's code, not in a config.
func SectionOf[C Section](c Config, key string) C {
	v, ok := c.Section(key).(C)
	if !ok {
		var want C
		panic(fmt.Sprintf("policy: section %q is %T, not %T", key, c.Section(key), want))
	}
	return v
}

// SetSection replaces the section under key with a copy of v, which must
// have the type the key's policy registered. It does not validate v: see
// ValidateAt.
func (c *Config) SetSection(key string, v any) error {
	s, ok := byKey[key]
	if !ok {
		return fmt.Errorf("policy: no section %q (want one of %s)", key, strings.Join(c.SectionKeys(), ", "))
	}
	if want := s.defaults(); reflect.TypeOf(v) != reflect.TypeOf(want) {
		return fmt.Errorf("policy: section %q takes a %T, got %T", key, want, v)
	}
	m := c.allSections()
	m[key] = cloneSection(v.(Section))
	c.sections = m
	return nil
}

// section returns the section under key without copying it, for reading
// inside this package. key must be registered.
func (c Config) section(key string) Section {
	if s, ok := c.sections[key]; ok {
		return s
	}
	return byKey[key].defaults()
}

// allSections returns a new map holding every registered section: c's own
// values (not copied: the map is new, the values are shared until replaced,
// never changed in place) and the defaults for those c lacks.
func (c Config) allSections() map[string]Section {
	m := make(map[string]Section, len(byKey))
	for key := range byKey {
		m[key] = c.section(key)
	}
	return m
}

// ValidateAt reports every invalid field, each named from path ("policy",
// "pools.slow.policy"): an unknown name, then every section in key order,
// then the trace settings.
func (c Config) ValidateAt(path string) error {
	var errs []error
	if _, ok := byName[c.Name]; !ok {
		errs = append(errs, fmt.Errorf("%s.name: unknown policy %q (want one of %s)",
			path, c.Name, strings.Join(Names(), ", ")))
	}
	for _, key := range c.SectionKeys() {
		errs = append(errs, c.section(key).ValidateAt(path+"."+key))
	}
	errs = append(errs, c.Trace.ValidateAt(path+".trace"))
	return errors.Join(errs...)
}

// validNonNeg reports whether v is a finite number >= 0.
func validNonNeg(v float64) bool { return v >= 0 && !math.IsInf(v, 1) }

// validPos reports whether v is a finite number > 0.
func validPos(v float64) bool { return v > 0 && !math.IsInf(v, 1) }
