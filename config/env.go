package config

import (
	"encoding"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnvPrefix starts every environment override. The variable for a setting is EnvPrefix
// followed by its YAML path with dots turned into underscores, upper-cased:
// decision.alpha → TRIAGE_DECISION_ALPHA, pools.slow.timeouts.first_byte →
// TRIAGE_POOLS_SLOW_TIMEOUTS_FIRST_BYTE. Only scalar settings (strings, numbers, booleans,
// durations) have one; lists and maps (replicas, headers, scorers) are set in the file.
const EnvPrefix = "TRIAGE_"

// ToolVars are the TRIAGE_ variables the project's own tools read: scripts/setup.sh, the
// training notebook, the engine tests' harness. They are not settings, and a shell that set
// one for those tools (setup.sh's error message tells users to set TRIAGE_CACHE_DIR) must still
// start the gateway, so they are skipped rather than reported as unknown; a misspelt setting
// still is. TestToolVarsAreWhatTheToolsRead keeps the list equal to what the tools read.
var ToolVars = []string{
	"TRIAGE_ABLATION", "TRIAGE_CACHE_DIR", "TRIAGE_DATA", "TRIAGE_DISTIL", "TRIAGE_DOLLY",
	"TRIAGE_EMBED_CACHE", "TRIAGE_ENCODERS_DIR", "TRIAGE_EXPORT_DIR", "TRIAGE_LABEL_MAP",
	"TRIAGE_NIXL_PTHR_DELAY_US", "TRIAGE_NIXL_SITE", "TRIAGE_OOD", "TRIAGE_OOD_MAX",
	"TRIAGE_PIN_CORE", "TRIAGE_VLLM_MODEL", "TRIAGE_VLLM_VENV",
}

// EnvVar describes one environment override.
type EnvVar struct {
	// Name is the variable, e.g. "TRIAGE_DECISION_ALPHA".
	Name string
	// Path is the setting's YAML path, e.g. "decision.alpha".
	Path string
	// Default is the default value as the variable would spell it.
	Default string
}

// EnvVars lists every environment override with its default, in Config field order (the
// sections of a sectioned type, such as the replica policy's, after its fields, in key order).
func EnvVars() []EnvVar {
	def := DefaultConfig()
	root := reflect.ValueOf(&def).Elem()
	fields := envFields()
	out := make([]EnvVar, 0, len(fields))
	for _, f := range fields {
		out = append(out, EnvVar{Name: f.env, Path: f.path, Default: formatScalar(valueAt(root, f.steps))})
	}
	return out
}

// sectioned is implemented, through a pointer, by a config type that holds some of its
// settings in sections rather than struct fields: each section is a value of its own type
// under its own YAML key, as policy.Config holds one per replica policy. The environment
// walks a section like a nested struct field named by its key, and changes one by reading
// the section, setting the field in that copy and handing it back with SetSection.
type sectioned interface {
	SectionKeys() []string
	Section(key string) any
	SetSection(key string, v any) error
}

var sectionedType = reflect.TypeFor[sectioned]()

// step is one move from a value to a setting inside it: into struct field number field,
// or, when section is set, into that section of a sectioned value.
type step struct {
	field   int
	section string
}

// envField is one scalar setting reachable from Config.
type envField struct {
	env   string // TRIAGE_...
	path  string // dotted YAML path
	steps []step // from the Config to the setting
}

// envFields is computed once: the set of settings is fixed by the types (and, for sectioned
// types, by the sections registered at init).
var envFields = sync.OnceValue(func() []envField { return scalarFields(reflect.TypeFor[Config]()) })

// scalarFields lists every scalar setting under the struct type t.
func scalarFields(t reflect.Type) []envField {
	var out []envField
	walkScalars(t, nil, nil, &out)
	return out
}

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// walkScalars appends every scalar field under t, named by its yaml tags, then the scalars of
// t's sections when t is sectioned. Inline structs share their parent's path; fields tagged
// "-" and unexported fields are skipped.
func walkScalars(t reflect.Type, path []string, steps []step, out *[]envField) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("yaml")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" {
			continue
		}
		st := append(slices.Clone(steps), step{field: i})
		if f.Anonymous && slices.Contains(strings.Split(opts, ","), "inline") {
			walkScalars(f.Type, path, st, out)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name) // yaml.v3's default key
		}
		walkValue(f.Type, append(slices.Clone(path), name), st, out)
	}
	if reflect.PointerTo(t).Implements(sectionedType) {
		s := reflect.New(t).Interface().(sectioned)
		for _, key := range s.SectionKeys() {
			st := append(slices.Clone(steps), step{section: key})
			walkValue(reflect.TypeOf(s.Section(key)), append(slices.Clone(path), key), st, out)
		}
	}
}

// walkValue appends the setting of type t at path: itself when it is a scalar, the scalars
// inside it when it is a struct, nothing otherwise (lists and maps are set in the file).
func walkValue(t reflect.Type, path []string, steps []step, out *[]envField) {
	switch {
	case isScalar(t):
		*out = append(*out, envField{
			env:   EnvPrefix + strings.ToUpper(strings.Join(path, "_")),
			path:  strings.Join(path, "."),
			steps: steps,
		})
	case t.Kind() == reflect.Struct:
		walkScalars(t, path, steps, out)
	}
}

// valueAt follows steps from v, which must be addressable, and returns the setting there.
// A section is read into a fresh addressable copy, so what is returned may be read but not
// set: setAt changes settings.
func valueAt(v reflect.Value, steps []step) reflect.Value {
	for _, st := range steps {
		if st.section == "" {
			v = v.Field(st.field)
			continue
		}
		v = sectionCopy(v.Addr().Interface().(sectioned), st.section)
	}
	return v
}

// setAt parses s into the setting that steps lead to from v, which must be addressable. A
// section on the way is copied, changed and handed back with SetSection, so a sectioned
// type never shares its sections with the caller.
func setAt(v reflect.Value, steps []step, s string) error {
	for i, st := range steps {
		if st.section == "" {
			v = v.Field(st.field)
			continue
		}
		sec := v.Addr().Interface().(sectioned)
		c := sectionCopy(sec, st.section)
		if err := setAt(c, steps[i+1:], s); err != nil {
			return err
		}
		return sec.SetSection(st.section, c.Interface())
	}
	return setScalar(v, s)
}

// sectionCopy returns an addressable copy of section key of sec.
func sectionCopy(sec sectioned, key string) reflect.Value {
	cur := reflect.ValueOf(sec.Section(key))
	c := reflect.New(cur.Type()).Elem()
	c.Set(cur)
	return c
}

func isScalar(t reflect.Type) bool {
	if t == durationType || reflect.PointerTo(t).Implements(textUnmarshalerType) {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool,
		reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return true
	}
	return false
}

// applyEnv sets every field named by a TRIAGE_ variable in env. It reports every unknown
// variable and every unparsable value, each naming its variable.
func applyEnv(cfg *Config, env []string) error {
	return applyEnvTo(reflect.ValueOf(cfg).Elem(), envFields(), env)
}

// applyEnvTo is applyEnv over any root value (addressable) and its fields.
func applyEnvTo(root reflect.Value, fields []envField, env []string) error {
	byName := make(map[string]envField, len(fields))
	for _, f := range fields {
		byName[f.env] = f
	}
	var errs []error
	for _, kv := range env {
		name, value, ok := cutEnv(kv)
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == EnvConfigFile || slices.Contains(ToolVars, name) {
			continue
		}
		f, known := byName[name]
		if !known {
			errs = append(errs, fmt.Errorf("%s: unknown variable (no such setting; `triage --help` lists them all)", name))
			continue
		}
		if err := setAt(root, f.steps, value); err != nil {
			errs = append(errs, fmt.Errorf("%s: invalid value %q for %s: %w", name, value, f.path, err))
		}
	}
	return errors.Join(errs...)
}

func cutEnv(kv string) (name, value string, ok bool) {
	return strings.Cut(kv, "=")
}

// setScalar parses s into v, which isScalar accepts.
func setScalar(v reflect.Value, s string) error {
	if v.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("want a duration like \"50ms\" or \"1m30s\"")
		}
		v.SetInt(int64(d))
		return nil
	}
	if u, ok := v.Addr().Interface().(encoding.TextUnmarshaler); ok {
		return u.UnmarshalText([]byte(s))
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return errors.New("want true or false")
		}
		v.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("want an integer (%d-bit)", v.Type().Bits())
		}
		v.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, v.Type().Bits())
		if err != nil {
			return fmt.Errorf("want a non-negative integer (%d-bit)", v.Type().Bits())
		}
		v.SetUint(n)
	case reflect.Float32, reflect.Float64:
		x, err := strconv.ParseFloat(s, v.Type().Bits())
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New("want a finite number")
		}
		v.SetFloat(x)
	default:
		return fmt.Errorf("unsupported kind %s", v.Kind())
	}
	return nil
}

// formatScalar spells v the way setScalar reads it.
func formatScalar(v reflect.Value) string {
	if v.Type() == durationType {
		return time.Duration(v.Int()).String()
	}
	if m, ok := v.Interface().(encoding.TextMarshaler); ok {
		b, err := m.MarshalText()
		if err == nil {
			return string(b)
		}
	}
	return fmt.Sprint(v.Interface())
}
