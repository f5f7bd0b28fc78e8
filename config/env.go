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

// EnvVar describes one environment override.
type EnvVar struct {
	// Name is the variable, e.g. "TRIAGE_DECISION_ALPHA".
	Name string
	// Path is the setting's YAML path, e.g. "decision.alpha".
	Path string
	// Default is the default value as the variable would spell it.
	Default string
}

// EnvVars lists every environment override with its default, in Config field order.
func EnvVars() []EnvVar {
	def := reflect.ValueOf(DefaultConfig())
	fields := envFields()
	out := make([]EnvVar, 0, len(fields))
	for _, f := range fields {
		out = append(out, EnvVar{Name: f.env, Path: f.path, Default: formatScalar(def.FieldByIndex(f.index))})
	}
	return out
}

// envField is one scalar setting reachable from Config.
type envField struct {
	env   string // TRIAGE_...
	path  string // dotted YAML path
	index []int  // for reflect.Value.FieldByIndex
}

// envFields is computed once: the set of settings is fixed by the types.
var envFields = sync.OnceValue(func() []envField {
	var out []envField
	walkScalars(reflect.TypeFor[Config](), nil, nil, &out)
	return out
})

var (
	durationType        = reflect.TypeFor[time.Duration]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// walkScalars appends every scalar field under t, named by its yaml tags. Inline structs
// share their parent's path; fields tagged "-" and unexported fields are skipped.
func walkScalars(t reflect.Type, path []string, index []int, out *[]envField) {
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
		idx := append(slices.Clone(index), i)
		if f.Anonymous && slices.Contains(strings.Split(opts, ","), "inline") {
			walkScalars(f.Type, path, idx, out)
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name) // yaml.v3's default key
		}
		p := append(slices.Clone(path), name)
		switch {
		case isScalar(f.Type):
			*out = append(*out, envField{
				env:   EnvPrefix + strings.ToUpper(strings.Join(p, "_")),
				path:  strings.Join(p, "."),
				index: idx,
			})
		case f.Type.Kind() == reflect.Struct:
			walkScalars(f.Type, p, idx, out)
		}
	}
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
	byName := make(map[string]envField, len(envFields()))
	for _, f := range envFields() {
		byName[f.env] = f
	}
	root := reflect.ValueOf(cfg).Elem()
	var errs []error
	for _, kv := range env {
		name, value, ok := cutEnv(kv)
		if !ok || !strings.HasPrefix(name, EnvPrefix) || name == EnvConfigFile {
			continue
		}
		f, known := byName[name]
		if !known {
			errs = append(errs, fmt.Errorf("%s: unknown variable (no such setting; `triage --help` lists them all)", name))
			continue
		}
		if err := setScalar(root.FieldByIndex(f.index), value); err != nil {
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
