package config

import (
	"errors"
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// renamedKey is a setting or a section that was renamed. The new path is canonical (the
// example, --print-config, --help); the old one is still read, from the file and from its
// TRIAGE_ variables, and reported through Sources.Deprecated, so that files and
// environments written for it keep working.
type renamedKey struct {
	old, new string // dotted YAML paths
}

// renamedKeys: "budget" names a time limit only (routing.classify_budget); the fleet's
// shared bound on slow requests is counted in slots.
var renamedKeys = []renamedKey{
	{old: "fleet.budget", new: "fleet.slots"},
}

// envName is the TRIAGE_ variable (or prefix of variables) of a dotted path.
func envName(path string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(path, ".", "_"))
}

// renameYAML rewrites every old key of renamedKeys in doc to its new name, reporting each to
// deprecated. A document that sets both spellings is an error naming both. It reports
// whether it changed doc.
func renameYAML(doc *yaml.Node, deprecated func(old, new string)) (bool, error) {
	changed := false
	var errs []error
	for _, r := range renamedKeys {
		parent, oldKey := splitPath(r.old)
		_, newKey := splitPath(r.new)
		m := mappingAt(doc, parent)
		if m == nil {
			continue
		}
		var oldNode, newNode *yaml.Node
		for i := 0; i+1 < len(m.Content); i += 2 {
			switch m.Content[i].Value {
			case oldKey:
				oldNode = m.Content[i]
			case newKey:
				newNode = m.Content[i]
			}
		}
		switch {
		case oldNode == nil:
		case newNode != nil:
			errs = append(errs, fmt.Errorf("line %d: %s: renamed to %s, which line %d sets too; keep only %[3]s",
				oldNode.Line, r.old, r.new, newNode.Line))
		default:
			oldNode.Value = newKey
			changed = true
			report(deprecated, r.old, r.new)
		}
	}
	return changed, errors.Join(errs...)
}

// renameEnv returns env with every variable of an old path renamed to the new path's,
// reporting each to deprecated. Setting both spellings of one variable is an error.
func renameEnv(env []string, deprecated func(old, new string)) ([]string, error) {
	set := map[string]bool{}
	for _, kv := range env {
		if name, _, ok := cutEnv(kv); ok {
			set[name] = true
		}
	}
	var out []string
	var errs []error
	for _, kv := range env {
		name, value, ok := cutEnv(kv)
		for _, r := range renamedKeys {
			rest, found := strings.CutPrefix(name, envName(r.old)+"_")
			if !ok || !found {
				continue
			}
			renamed := envName(r.new) + "_" + rest
			if set[renamed] {
				errs = append(errs, fmt.Errorf("%s: renamed to %s, which is set too; keep only %[2]s", name, renamed))
				kv = ""
				break
			}
			report(deprecated, name, renamed)
			kv = renamed + "=" + value
			break
		}
		if kv != "" {
			out = append(out, kv)
		}
	}
	return out, errors.Join(errs...)
}

func report(deprecated func(old, new string), old, new string) {
	if deprecated != nil {
		deprecated(old, new)
	}
}

// splitPath splits "fleet.budget" into "fleet" and "budget".
func splitPath(path string) (parent, key string) {
	i := strings.LastIndexByte(path, '.')
	if i < 0 {
		return "", path
	}
	return path[:i], path[i+1:]
}

// mappingAt returns the mapping node at a dotted path of doc ("" is the root), or nil.
func mappingAt(doc *yaml.Node, path string) *yaml.Node {
	n := doc
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	if path == "" {
		return mappingOrNil(n)
	}
	for _, key := range strings.Split(path, ".") {
		if n.Kind != yaml.MappingNode {
			return nil
		}
		var next *yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				next = n.Content[i+1]
			}
		}
		if next == nil {
			return nil
		}
		n = next
	}
	return mappingOrNil(n)
}

func mappingOrNil(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.MappingNode {
		return n
	}
	return nil
}
