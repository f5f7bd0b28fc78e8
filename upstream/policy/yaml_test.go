package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// decodeInto decodes doc onto cfg the way config.Load does: a strict yaml.v3
// decoder, with Config decoding itself.
func decodeInto(cfg *Config, doc string) error {
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	return dec.Decode(cfg)
}

func TestConfigYAMLIsStrict(t *testing.T) {
	tests := []struct {
		name, doc string
		want      []string // each must appear in the error
	}{
		{"unknown policy key", "name: random\nprefix_cach: {}\n",
			[]string{"line 2: field prefix_cach not found in type policy.Config"}},
		{"unknown section key", "prefix_cache:\n  block_chars: 4\n  imbalance: 3\n",
			[]string{"line 3: field imbalance not found in type policy.PrefixCacheConfig"}},
		{"unknown trace key", "trace: {enabled: true, top: 3}\n",
			[]string{"line 1: field top not found in type policy.TraceConfig"}},
		{"repeated key", "lmetric:\n  variant: sticky\n  variant: unified\n",
			[]string{`line 3: mapping key "variant" already defined at line 2`}},
		{"bare number duration", "vtc:\n  window: 60\n",
			[]string{`line 2: vtc.window: invalid duration "60" (want a string like "50ms" or "1m")`}},
		{"bad duration", "vtc: {window: soon}\n",
			[]string{`line 1: vtc.window: invalid duration "soon"`}},
		{"wrong scalar type", "prefix_cache:\n  block_chars: lots\n",
			[]string{"line 2: prefix_cache.block_chars: cannot unmarshal !!str `lots` into int"}},
		{"wrong map value", "weighted:\n  scorers: {queue-depth: high}\n",
			[]string{"line 2: weighted.scorers.queue-depth: cannot unmarshal !!str `high` into float64"}},
		{"section not a mapping", "vtc: 60s\n",
			[]string{"line 1: vtc: cannot unmarshal !!str into policy.VTCConfig (want a mapping)"}},
		{"policy not a mapping", "random\n",
			[]string{"line 1: cannot unmarshal !!str into policy.Config (want a mapping)"}},
		{"every problem at once", "name: [a]\nvtc: {window: 1}\nrandom: {seed: -1, extra: 1}\n",
			[]string{"line 1: name: cannot unmarshal !!seq into string", "line 2: vtc.window", "line 3: random.seed", "line 3: field extra not found"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			err := decodeInto(&cfg, tt.doc)
			var te *yaml.TypeError
			require.True(t, errors.As(err, &te), "want a *yaml.TypeError, got %v", err)
			require.Len(t, te.Errors, len(tt.want), "%v", err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
			require.Equal(t, DefaultConfig(), cfg, "a failed decode changes nothing")
		})
	}
}

func TestConfigYAMLDecodesOntoCurrentValues(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = "lmetric"
	update(&cfg, "lmetric", func(s *LMetricConfig) { s.MaxSessions = 7 })
	require.NoError(t, decodeInto(&cfg, "lmetric: {variant: sticky}\ntrace: {enabled: true}\n"))
	require.Equal(t, "lmetric", cfg.Name, "an omitted name is kept")
	lm := SectionOf[LMetricConfig](cfg, "lmetric")
	require.Equal(t, LMetricSticky, lm.Variant)
	require.Equal(t, 7, lm.MaxSessions, "omitted fields keep the value they had, not only the defaults")
	require.Equal(t, 128, lm.BlockChars)
	require.Equal(t, TraceConfig{Enabled: true, TopK: 3, Capacity: 1024}, cfg.Trace)

	var zero Config
	require.NoError(t, decodeInto(&zero, "name: prefix-cache\nprefix_cache: {block_chars: 8}\n"))
	want := DefaultPrefixCacheConfig()
	want.BlockChars = 8
	require.Equal(t, want, SectionOf[PrefixCacheConfig](zero, "prefix_cache"), "a zero Config's sections decode onto the defaults")
}

func TestConfigYAMLMergeKeysAndAliases(t *testing.T) {
	cfg := DefaultConfig()
	require.NoError(t, decodeInto(&cfg, `
prefix_cache: &blocks
  block_chars: 64
  index_blocks: 5000
lmetric:
  <<: *blocks
  block_chars: 32
weighted:
  index_blocks: &ib 99
  block_chars: *ib
`[1:]))
	require.Equal(t, 64, SectionOf[PrefixCacheConfig](cfg, "prefix_cache").BlockChars)
	lm := SectionOf[LMetricConfig](cfg, "lmetric")
	require.Equal(t, 32, lm.BlockChars, "the mapping's own keys win over merged ones")
	require.Equal(t, 5000, lm.IndexBlocks)
	require.Equal(t, 99, SectionOf[WeightedConfig](cfg, "weighted").BlockChars)

	// A merged key the target does not know is as unknown as a written one.
	cfg = DefaultConfig()
	err := decodeInto(&cfg, "prefix_cache: &pc {load_factor: 3}\nlmetric:\n  <<: *pc\n  block_chars: 32\n")
	require.ErrorContains(t, err, "field load_factor not found in type policy.LMetricConfig")
}

func TestConfigYAMLReportsWithTheEnclosingDecoder(t *testing.T) {
	var doc struct {
		Policy Config `yaml:"policy"`
		Other  int    `yaml:"other"`
	}
	doc.Policy = DefaultConfig()
	dec := yaml.NewDecoder(strings.NewReader("policy:\n  nme: x\nothr: 1\n"))
	dec.KnownFields(true)
	err := dec.Decode(&doc)
	require.ErrorContains(t, err, "line 2: field nme not found in type policy.Config")
	require.ErrorContains(t, err, "line 3: field othr not found")
}

func TestConfigYAMLRoundTrip(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Name = "weighted"
	cfg.Trace.Enabled = true
	setScorers(&cfg, map[string]float64{"load-balance": 1, "queue-depth": 0.5})
	update(&cfg, "vtc", func(s *VTCConfig) { s.Window = 90 * time.Second })
	update(&cfg, "lmetric", func(s *LMetricConfig) { s.Variant = LMetricUnified })

	out, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	var n yaml.Node
	require.NoError(t, yaml.Unmarshal(out, &n))
	var keys []string
	for i := 0; i < len(n.Content[0].Content); i += 2 {
		keys = append(keys, n.Content[0].Content[i].Value)
	}
	require.Equal(t, []string{"name", "least_busy_time", "least_latency", "least_utilization", "lmetric", "preble", "prefix_cache", "random", "slo", "throughput", "vtc", "weighted", "trace"}, keys,
		"name, the sections in key order, trace")
	require.Contains(t, string(out), "window: 1m30s")

	back := DefaultConfig()
	require.NoError(t, decodeInto(&back, string(out)))
	require.Equal(t, cfg, back)
}

func TestConfigJSON(t *testing.T) {
	b, err := json.Marshal(DefaultConfig())
	require.NoError(t, err)
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(b, &m))
	require.ElementsMatch(t, []string{"name", "least_busy_time", "least_latency", "least_utilization", "lmetric", "preble", "prefix_cache", "random", "slo", "throughput", "vtc", "weighted", "trace"}, slices.Collect(maps.Keys(m)))
	require.JSONEq(t, `{"block_chars":128,"index_blocks":200000,"imbalance_count":16,"load_factor":2}`, string(m["prefix_cache"]))
}

func TestWeightedPrintsDefaultScorersForNil(t *testing.T) {
	cfg := DefaultConfig()
	setScorers(&cfg, nil)
	out, err := yaml.Marshal(cfg)
	require.NoError(t, err)
	back := DefaultConfig()
	require.NoError(t, decodeInto(&back, string(out)))
	require.Equal(t, DefaultScorerWeights(), SectionOf[WeightedConfig](back, "weighted").Scorers,
		"nil scorers print as the weights they stand for, not as {} (which is invalid)")
	require.NoError(t, back.ValidateAt("policy"))
}

// strictDecoder is general: these shapes appear in no section today, and a
// new policy's section may bring them.
type textValue string

func (v *textValue) UnmarshalText(b []byte) error {
	if !strings.HasPrefix(string(b), "ok") {
		return fmt.Errorf("want a value starting with ok, got %q", b)
	}
	*v = textValue(b)
	return nil
}

type nestedSection struct {
	Inner struct {
		Depth int `yaml:"depth"`
	} `yaml:"inner"`
	Embedded `yaml:",inline"`
	Text     textValue      `yaml:"text"`
	Ptr      *int           `yaml:"ptr"`
	List     []nestedItem   `yaml:"list"`
	Untagged int            // yaml.v3 calls it "untagged"
	Skipped  int            `yaml:"-"`
	Node     yaml.Node      `yaml:"node"` // has its own UnmarshalYAML
	Counts   map[string]int `yaml:"counts"`
}

type Embedded struct {
	Flat bool `yaml:"flat"`
}

type nestedItem struct {
	ID string `yaml:"id"`
}

func strictDecode(t *testing.T, v any, doc string) []string {
	t.Helper()
	var n yaml.Node
	require.NoError(t, yaml.Unmarshal([]byte(doc), &n))
	var d strictDecoder
	d.decode(n.Content[0], reflect.ValueOf(v).Elem(), "sec")
	return d.errs
}

func TestStrictDecoderShapes(t *testing.T) {
	var s nestedSection
	s.Counts = map[string]int{"kept": 1}
	shared := s.Counts
	errs := strictDecode(t, &s, `
inner: {depth: 2}
flat: true
text: okay
ptr: 5
list: [{id: a}, {id: b}]
untagged: 3
node: {anything: [goes, here]}
counts: {x: 1}
`)
	require.Empty(t, errs)
	require.Equal(t, 2, s.Inner.Depth)
	require.True(t, s.Flat)
	require.Equal(t, textValue("okay"), s.Text)
	require.Equal(t, 5, *s.Ptr)
	require.Equal(t, []nestedItem{{"a"}, {"b"}}, s.List)
	require.Equal(t, 3, s.Untagged)
	require.Equal(t, yaml.MappingNode, s.Node.Kind)
	require.Equal(t, map[string]int{"x": 1}, s.Counts, "a map is replaced, not merged into")
	require.Equal(t, map[string]int{"kept": 1}, shared, "nor written through")

	errs = strictDecode(t, &s, `
inner: {depth: 2, width: 3}
text: bad
list: [{id: a}, {name: b}]
skipped: 1
ptr: [1]
`)
	require.Equal(t, []string{
		"line 2: field width not found in type struct { Depth int \"yaml:\\\"depth\\\"\" }",
		`line 3: sec.text: want a value starting with ok, got "bad"`,
		"line 4: field name not found in type policy.nestedItem",
		"line 5: field skipped not found in type policy.nestedSection",
		"line 6: sec.ptr: cannot unmarshal !!seq into int",
	}, errs)
}
