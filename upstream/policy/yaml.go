package policy

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// UnmarshalYAML decodes a policy mapping onto c: the keys name and trace
// and each registered section key, every one decoded onto its current value
// so that omitted fields keep theirs. A list or map value (the weighted
// policy's scorers) replaces the current one whole.
//
// The decoding is strict at every depth, as yaml.v3's KnownFields is for
// plain structs (which yaml.Node.Decode cannot be asked for): an unknown or
// repeated key is an error naming the key and its line, and so is a value
// that does not fit its field, named by its line and its path from the
// policy mapping ("line 12: vtc.window: invalid duration \"60\" ...").
// Every problem is collected into one *yaml.TypeError, which a decoder
// reading a whole file reports together with its own; c is then unchanged.
func (c *Config) UnmarshalYAML(n *yaml.Node) error {
	var d strictDecoder
	out := Config{Name: c.Name, Trace: c.Trace, sections: c.allSections()}
	d.mapping(n, reflect.TypeFor[Config](), "", func(k *yaml.Node, val *yaml.Node) bool {
		switch key := k.Value; key {
		case "name":
			d.decode(val, reflect.ValueOf(&out.Name).Elem(), key)
		case "trace":
			d.decode(val, reflect.ValueOf(&out.Trace).Elem(), key)
		default:
			if _, ok := byKey[key]; !ok {
				return false
			}
			v := reflect.New(reflect.TypeOf(out.sections[key])).Elem()
			v.Set(reflect.ValueOf(cloneSection(out.sections[key])))
			d.decode(val, v, key)
			out.sections[key] = v.Interface().(Section)
		}
		return true
	})
	if len(d.errs) > 0 {
		return &yaml.TypeError{Errors: d.errs}
	}
	*c = out
	return nil
}

// MarshalYAML writes c in the form UnmarshalYAML reads: name, the sections
// in key order, trace. Each section is encoded by its own type, so a
// section can print a value its zero stands for (the weighted policy's
// default scorer weights).
func (c Config) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	add := func(key string, v any) error {
		var val yaml.Node
		if err := val.Encode(v); err != nil {
			return fmt.Errorf("policy.%s: %w", key, err)
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, &val)
		return nil
	}
	if err := add("name", c.Name); err != nil {
		return nil, err
	}
	for _, key := range c.SectionKeys() {
		if err := add(key, c.section(key)); err != nil {
			return nil, err
		}
	}
	if err := add("trace", c.Trace); err != nil {
		return nil, err
	}
	return n, nil
}

// MarshalJSON writes c as an object with the same keys as its YAML form
// (for reports and status output; configuration is read from YAML only).
func (c Config) MarshalJSON() ([]byte, error) {
	m := map[string]any{"name": c.Name, "trace": c.Trace}
	for _, key := range c.SectionKeys() {
		m[key] = c.section(key)
	}
	return json.Marshal(m)
}

// strictDecoder decodes YAML nodes onto Go values by reflection, refusing
// unknown and repeated keys at any depth, and collects every problem as a
// yaml.TypeError line ("line 3: ..."). Values it does not take apart
// (scalars, types with their own UnmarshalYAML) go to yaml.Node.Decode.
type strictDecoder struct{ errs []string }

var (
	durationType        = reflect.TypeFor[time.Duration]()
	nodeType            = reflect.TypeFor[yaml.Node]()
	yamlUnmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

const (
	nullTag  = "!!null"
	strTag   = "!!str"
	mergeTag = "!!merge"
)

// errorf records a problem at n, its message prefixed by path when there is one.
func (d *strictDecoder) errorf(n *yaml.Node, path, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if path != "" {
		msg = path + ": " + msg
	}
	d.errs = append(d.errs, fmt.Sprintf("line %d: %s", n.Line, msg))
}

// decode decodes n onto v, which must be settable; path names v from the
// policy mapping, for messages.
func (d *strictDecoder) decode(n *yaml.Node, v reflect.Value, path string) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	t := v.Type()
	switch {
	case n.ShortTag() == nullTag:
		d.plain(n, v, path) // yaml.v3's rules: pointers, maps and slices become nil, the rest stays
	case t.Kind() == reflect.Pointer:
		// A fresh target, so that decoding never writes through a pointer
		// the value shares with a copy of it.
		p := reflect.New(t.Elem())
		if !v.IsNil() {
			p.Elem().Set(v.Elem())
		}
		d.decode(n, p.Elem(), path)
		v.Set(p)
	case t == nodeType || reflect.PointerTo(t).Implements(yamlUnmarshalerType):
		d.delegate(n, v)
	case t == durationType:
		d.duration(n, v, path)
	case reflect.PointerTo(t).Implements(textUnmarshalerType):
		d.text(n, v, path)
	case t.Kind() == reflect.Struct:
		d.mapping(n, t, path, func(k, val *yaml.Node) bool {
			f, ok := fieldByKey(v, k.Value)
			if ok {
				d.decode(val, f, joinPath(path, k.Value))
			}
			return ok
		})
	case t.Kind() == reflect.Map:
		m := reflect.MakeMap(t) // replaces the current map: nothing is merged into it
		d.mapping(n, t, path, func(k, val *yaml.Node) bool {
			kv := reflect.New(t.Key()).Elem()
			d.decode(k, kv, path)
			ev := reflect.New(t.Elem()).Elem()
			d.decode(val, ev, joinPath(path, k.Value))
			m.SetMapIndex(kv, ev)
			return true
		})
		if n.Kind == yaml.MappingNode {
			v.Set(m)
		}
	case t.Kind() == reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "cannot unmarshal %s into %s (want a sequence)", n.ShortTag(), t)
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, e := range n.Content {
			d.decode(e, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	default:
		d.plain(n, v, path)
	}
}

// mapping walks the pairs of a mapping node bound for a value of type t,
// merge keys ("<<: *base") first so that the mapping's own keys win, and
// hands each key with its value to take, which reports whether it knows the
// key. Unknown and repeated keys are recorded as errors.
func (d *strictDecoder) mapping(n *yaml.Node, t reflect.Type, path string, take func(k, v *yaml.Node) bool) {
	for n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "cannot unmarshal %s into %s (want a mapping)", n.ShortTag(), t)
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].ShortTag() != mergeTag {
			continue
		}
		merged := n.Content[i+1]
		for merged.Kind == yaml.AliasNode {
			merged = merged.Alias
		}
		if merged.Kind == yaml.SequenceNode {
			for _, m := range slices.Backward(merged.Content) { // earlier ones win
				d.mapping(m, t, path, take)
			}
			continue
		}
		d.mapping(merged, t, path, take)
	}
	seen := make(map[string]int, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if k.ShortTag() == mergeTag {
			continue
		}
		if line, dup := seen[k.Value]; dup {
			d.errorf(k, "", "mapping key %q already defined at line %d", k.Value, line)
			continue
		}
		seen[k.Value] = k.Line
		if !take(k, n.Content[i+1]) {
			d.errorf(k, "", "field %s not found in type %s", k.Value, t)
		}
	}
}

// duration reads a Go duration string ("50ms", "1m30s"). A bare number is
// refused rather than guessed at, as everywhere in the configuration.
func (d *strictDecoder) duration(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.ScalarNode && n.ShortTag() == strTag {
		if x, err := time.ParseDuration(n.Value); err == nil {
			v.SetInt(int64(x))
			return
		}
	}
	d.errorf(n, path, "invalid duration %q (want a string like \"50ms\" or \"1m\")", n.Value)
}

// text hands a scalar to the value's UnmarshalText, naming line and path when it fails
// (yaml.v3 itself reports neither).
func (d *strictDecoder) text(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.ScalarNode {
		d.errorf(n, path, "cannot unmarshal %s into %s (want a scalar)", n.ShortTag(), v.Type())
		return
	}
	if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
		d.errorf(n, path, "%v", err)
	}
}

// plain decodes a scalar (or a null) with yaml.v3's own rules.
func (d *strictDecoder) plain(n *yaml.Node, v reflect.Value, path string) {
	if err := n.Decode(v.Addr().Interface()); err != nil {
		if n.Kind == yaml.ScalarNode {
			d.errorf(n, path, "cannot unmarshal %s `%s` into %s", n.ShortTag(), n.Value, v.Type())
		} else {
			d.errorf(n, path, "cannot unmarshal %s into %s", n.ShortTag(), v.Type())
		}
	}
}

// delegate decodes onto a type with its own UnmarshalYAML (or a yaml.Node,
// which takes anything), keeping its messages.
func (d *strictDecoder) delegate(n *yaml.Node, v reflect.Value) {
	err := n.Decode(v.Addr().Interface())
	if te, ok := err.(*yaml.TypeError); ok {
		d.errs = append(d.errs, te.Errors...)
	} else if err != nil {
		d.errorf(n, "", "%v", err)
	}
}

// fieldByKey returns the field of struct v that YAML key decodes into,
// looking through inline structs, as yaml.v3 names fields: the yaml tag, or
// the lower-cased field name without one.
func fieldByKey(v reflect.Value, key string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if !f.IsExported() || name == "-" {
			continue
		}
		if f.Anonymous && slices.Contains(strings.Split(opts, ","), "inline") && f.Type.Kind() == reflect.Struct {
			if fv, ok := fieldByKey(v.Field(i), key); ok {
				return fv, true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if name == key {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
