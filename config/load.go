package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/triage-gw/triage/upstream"
	"gopkg.in/yaml.v3"
)

// EnvConfigFile names the environment variable that gives the config file's path when
// Sources.File is empty (the --config flag wins over it).
const EnvConfigFile = EnvPrefix + "CONFIG"

// Sources says where the configuration comes from. Later sources override earlier ones:
// defaults, then File, then the environment, then Listen and Simulate.
type Sources struct {
	// File is the YAML file to read. Empty means the path in TRIAGE_CONFIG, or no file.
	File string
	// Environ holds "KEY=VALUE" pairs to take TRIAGE_ overrides from. Nil means
	// os.Environ(); pass an empty slice for none.
	Environ []string
	// Listen is the --listen flag's value; empty means the flag was not given.
	Listen string
	// Simulate is the --simulate flag: it sets sim.enabled, starting the built-in simulated
	// pools.
	Simulate bool
	// InstallRoot is where the gateway is installed (cmd/triage passes the directory above
	// its executable: the repository root for bin/triage). A classifier path left at its
	// relative default that does not exist under the working directory is taken from there,
	// so the binary runs from any directory. Empty: the working directory only.
	InstallRoot string
	// Deprecated, when set, is told of every renamed setting read under its old name (a file
	// key such as fleet.budget, or a TRIAGE_ variable), with the new name, which it should
	// warn about once. Nil: they are read without a word.
	Deprecated func(old, new string)
	// ListenOnly loads for a caller that needs server.listen alone (--healthcheck, run
	// beside a gateway started with flags it does not see): only the server section is
	// validated, so a config that relies on --simulate still yields its address.
	ListenOnly bool
}

// Load builds the configuration: defaults, the YAML file (unknown keys are errors naming the
// key and its line), TRIAGE_ environment overrides (an unknown TRIAGE_ variable or a bad
// value is an error naming the variable), the --listen flag, and finally Validate, which
// reports every invalid field at once.
func Load(src Sources) (Config, error) {
	env := src.Environ
	if env == nil {
		env = os.Environ()
	}
	cfg := DefaultConfig()
	path := src.File
	if path == "" {
		path = lookup(env, EnvConfigFile)
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: %w", err)
		}
		if err := decodeYAMLRenamed(data, &cfg, src.Deprecated); err != nil {
			return Config{}, fmt.Errorf("config file %s: %w", path, err)
		}
		fileRelative(&cfg, filepath.Dir(path))
	}
	env, err := renameEnv(env, src.Deprecated)
	if err == nil {
		err = applyEnv(&cfg, env)
	}
	if err != nil {
		return Config{}, fmt.Errorf("config: environment: %w", err)
	}
	if src.Listen != "" {
		cfg.Server.Listen = src.Listen
	}
	installRelative(&cfg, src.InstallRoot)
	if src.Simulate {
		cfg.Sim.Enabled = true
	}
	if src.ListenOnly {
		if err := cfg.Server.ValidateAt("server"); err != nil {
			return Config{}, fmt.Errorf("config: invalid:\n%w", err)
		}
		return cfg, nil
	}
	if cfg.Sim.Enabled && !cfg.Pools.Empty() {
		// Either would be a silent surprise: real replicas ignored, or simulated ones mixed in.
		return Config{}, errors.New("config: invalid:\nsim.enabled: the built-in simulated pools cannot be combined " +
			"with configured replicas (pools.fast.replicas, pools.slow.replicas): remove one or the other")
	}
	if err := resolveSecrets(&cfg, env); err != nil {
		return Config{}, fmt.Errorf("config: invalid:\n%w", err)
	}
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("config: invalid:\n%w", err)
	}
	return cfg, nil
}

// classifierPaths are the classifier's file settings, for path resolution.
func classifierPaths(cfg *Config) []*string {
	return []*string{&cfg.Classifier.ModelDir, &cfg.Classifier.EncoderDir, &cfg.Classifier.ORTLibrary}
}

// fileRelative makes the relative classifier paths that the config file set relative to
// the file's directory, as a reader of the file expects (a file beside its models works from
// any working directory). Paths left at their defaults are not the file's and stay as they are.
func fileRelative(cfg *Config, dir string) {
	def := DefaultConfig()
	for i, p := range classifierPaths(cfg) {
		if *p != *classifierPaths(&def)[i] && *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// installRelative takes a classifier path still at its relative default from root when it
// is missing under the working directory but present there: the defaults name files of the
// repository (models/) and of its setup (.deps/), found beside bin/triage wherever it is
// started. A path that exists nowhere is left as it is, for the classifier to report.
func installRelative(cfg *Config, root string) {
	if root == "" {
		return
	}
	def := DefaultConfig()
	for i, p := range classifierPaths(cfg) {
		if *p != *classifierPaths(&def)[i] || filepath.IsAbs(*p) {
			continue
		}
		if _, err := os.Stat(*p); err == nil {
			continue
		}
		if alt := filepath.Join(root, *p); exists(alt) {
			*p = alt
		}
	}
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// decodeYAMLRenamed is decodeYAML for a document that may spell renamed settings the old way
// (renamed.go): they are reported to deprecated and decoded as the new ones.
func decodeYAMLRenamed(data []byte, cfg *Config, deprecated func(old, new string)) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc, extra yaml.Node
	if dec.Decode(&doc) != nil || dec.Decode(&extra) == nil {
		return decodeYAML(data, cfg) // decodeYAML words the error, or refuses the second document
	}
	changed, err := renameYAML(&doc, deprecated)
	if err != nil {
		return err
	}
	if changed {
		if data, err = yaml.Marshal(&doc); err != nil {
			return err
		}
	}
	return decodeYAML(data, cfg)
}

// decodeYAML decodes one YAML document over cfg, which holds the defaults: keys absent from
// the document keep them. Unknown keys fail ("line 3: field lisen not found in type
// server.HTTPConfig"). An empty document changes nothing.
func decodeYAML(data []byte, cfg *Config) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil
		}
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return errors.New("more than one YAML document; the config is a single document")
	}
	// yaml.v3 reports a failing UnmarshalText (upstream.Duration) without a line or a field;
	// check those values first so the message names both.
	if err := checkText(&doc, reflect.TypeFor[Config](), ""); err != nil {
		return err
	}
	// yaml.Node.Decode has no KnownFields switch, so the bytes go through a strict decoder.
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(cfg); err != nil {
		return err
	}
	normalizeDecoded(cfg)
	return nil
}

// normalizeDecoded makes an explicit empty list equal to an absent one ("replicas: []" in
// the example reads the same as the default).
func normalizeDecoded(cfg *Config) {
	for _, p := range []*upstream.PoolConfig{&cfg.Pools.Fast, &cfg.Pools.Slow} {
		if len(p.Replicas) == 0 {
			p.Replicas = nil
		}
	}
}

// checkText walks a document alongside the Go type it decodes into and tries every scalar
// bound for an encoding.TextUnmarshaler, returning the first failure with its line and
// path. Everything else (unknown keys, wrong types) is left to the strict decoder.
func checkText(n *yaml.Node, t reflect.Type, path string) error {
	if n.Kind == yaml.DocumentNode {
		for _, c := range n.Content {
			if err := checkText(c, t, path); err != nil {
				return err
			}
		}
		return nil
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.ScalarNode && reflect.PointerTo(t).Implements(textUnmarshalerType) && n.Tag != "!!null" {
		v := reflect.New(t).Interface().(encoding.TextUnmarshaler)
		if err := v.UnmarshalText([]byte(n.Value)); err != nil {
			return fmt.Errorf("line %d: %s: %w", n.Line, path, err)
		}
		return nil
	}
	switch {
	case n.Kind == yaml.MappingNode && t.Kind() == reflect.Struct:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, val := n.Content[i].Value, n.Content[i+1]
			if ft, ok := yamlField(t, key); ok {
				if err := checkText(val, ft, joinPath(path, key)); err != nil {
					return err
				}
			}
		}
	case n.Kind == yaml.SequenceNode && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
		for i, c := range n.Content {
			if err := checkText(c, t.Elem(), fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// yamlField finds the type of the field a key decodes into, looking through inline structs.
func yamlField(t reflect.Type, key string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if f.Anonymous && slices.Contains(strings.Split(opts, ","), "inline") {
			if ft, ok := yamlField(f.Type, key); ok {
				return ft, true
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		if f.IsExported() && name == key {
			return f.Type, true
		}
	}
	return nil, false
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolveSecrets reads the secrets that config names by environment variable rather than
// holds: the fleet's Redis password.
func resolveSecrets(cfg *Config, env []string) error {
	name := cfg.Fleet.PasswordEnv
	if name == "" {
		return nil
	}
	if strings.HasPrefix(name, EnvPrefix) {
		return fmt.Errorf("fleet.password_env: %q starts with %s, which names settings; use another name such as REDIS_PASSWORD", name, EnvPrefix)
	}
	v := lookup(env, name)
	if v == "" && cfg.Fleet.Enabled {
		return fmt.Errorf("fleet.password_env: environment variable %s is not set or empty", name)
	}
	cfg.Fleet.Password = v
	return nil
}

// lookup returns the value of key in env, or "".
func lookup(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := cutEnv(kv); ok && k == key {
			return v
		}
	}
	return ""
}
