package config

import (
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeSections is a sectioned config: a name and trace field plus two sections under keys
// "alpha" and "beta", each of its own type, held in a map that is never mutated in place
// (SetSection builds a new one), as policy.Config does.
type fakeSections struct {
	Name     string `yaml:"name"`
	Limit    int    `yaml:"limit"`
	sections map[string]any
}

type alphaSection struct {
	Size  int           `yaml:"size"`
	Every time.Duration `yaml:"every"`
	Inner struct {
		On bool `yaml:"on"`
	} `yaml:"inner"`
	Weights map[string]float64 `yaml:"weights"` // not a scalar: no variable
}

type betaSection struct {
	Seed uint64 `yaml:"seed"`
}

var fakeDefaults = map[string]any{"alpha": alphaSection{Size: 8, Every: time.Second}, "beta": betaSection{Seed: 3}}

func (f fakeSections) SectionKeys() []string { return slices.Sorted(maps.Keys(fakeDefaults)) }

func (f fakeSections) Section(key string) any {
	if v, ok := f.sections[key]; ok {
		return v
	}
	return fakeDefaults[key]
}

func (f *fakeSections) SetSection(key string, v any) error {
	if reflect.TypeOf(v) != reflect.TypeOf(fakeDefaults[key]) {
		return fmt.Errorf("section %s: wrong type %T", key, v)
	}
	m := maps.Clone(f.sections)
	if m == nil {
		m = map[string]any{}
	}
	m[key] = v
	f.sections = m
	return nil
}

type fakeRoot struct {
	Top struct {
		Policy fakeSections `yaml:"policy"`
	} `yaml:"top"`
}

func TestEnvWalksSections(t *testing.T) {
	fields := scalarFields(reflect.TypeFor[fakeRoot]())
	var names []string
	for _, f := range fields {
		names = append(names, f.env+"="+f.path)
	}
	require.Equal(t, []string{
		"TRIAGE_TOP_POLICY_NAME=top.policy.name",
		"TRIAGE_TOP_POLICY_LIMIT=top.policy.limit",
		"TRIAGE_TOP_POLICY_ALPHA_SIZE=top.policy.alpha.size",
		"TRIAGE_TOP_POLICY_ALPHA_EVERY=top.policy.alpha.every",
		"TRIAGE_TOP_POLICY_ALPHA_INNER_ON=top.policy.alpha.inner.on",
		"TRIAGE_TOP_POLICY_BETA_SEED=top.policy.beta.seed",
	}, names, "fields in order, then each section's scalars in key order; maps have no variable")

	var root fakeRoot
	v := reflect.ValueOf(&root).Elem()
	defaults := map[string]string{}
	for _, f := range fields {
		defaults[f.env] = formatScalar(valueAt(v, f.steps))
	}
	require.Equal(t, "8", defaults["TRIAGE_TOP_POLICY_ALPHA_SIZE"], "a zero sectioned value reads its sections' defaults")
	require.Equal(t, "1s", defaults["TRIAGE_TOP_POLICY_ALPHA_EVERY"])
	require.Equal(t, "3", defaults["TRIAGE_TOP_POLICY_BETA_SEED"])

	before := root // shares no map yet: sections is nil
	require.NoError(t, applyEnvTo(v, fields, []string{
		"TRIAGE_TOP_POLICY_NAME=x",
		"TRIAGE_TOP_POLICY_ALPHA_SIZE=5",
		"TRIAGE_TOP_POLICY_ALPHA_INNER_ON=true",
		"TRIAGE_TOP_POLICY_BETA_SEED=9",
	}))
	p := root.Top.Policy
	require.Equal(t, "x", p.Name)
	alpha := p.Section("alpha").(alphaSection)
	require.Equal(t, 5, alpha.Size)
	require.True(t, alpha.Inner.On)
	require.Equal(t, time.Second, alpha.Every, "fields not set keep the section's value")
	require.Equal(t, uint64(9), p.Section("beta").(betaSection).Seed)
	require.Equal(t, 8, before.Top.Policy.Section("alpha").(alphaSection).Size, "a copy taken before is unchanged")

	copied := root
	require.NoError(t, applyEnvTo(v, fields, []string{"TRIAGE_TOP_POLICY_ALPHA_SIZE=6"}))
	require.Equal(t, 6, root.Top.Policy.Section("alpha").(alphaSection).Size)
	require.Equal(t, 5, copied.Top.Policy.Section("alpha").(alphaSection).Size, "setting a section replaces the map, never writes into a shared one")

	err := applyEnvTo(v, fields, []string{"TRIAGE_TOP_POLICY_ALPHA_EVERY=50", "TRIAGE_TOP_POLICY_GAMMA_X=1"})
	require.ErrorContains(t, err, `TRIAGE_TOP_POLICY_ALPHA_EVERY: invalid value "50" for top.policy.alpha.every: want a duration`)
	require.ErrorContains(t, err, "TRIAGE_TOP_POLICY_GAMMA_X: unknown variable")
}

// TestToolVarsAreWhatTheToolsRead: every TRIAGE_ name in the project's scripts, notebook,
// tests, benchmarks and deployment files is a setting, the config file's variable or one of
// ToolVars, and every one of ToolVars is still read somewhere.
func TestToolVarsAreWhatTheToolsRead(t *testing.T) {
	settings := map[string]bool{EnvConfigFile: true}
	for _, v := range EnvVars() {
		settings[v.Name] = true
	}
	name := regexp.MustCompile(`TRIAGE_[A-Z0-9_]*[A-Z0-9]`)
	seen := map[string]string{} // name → a file that holds it
	for _, dir := range []string{"scripts", "train", "tests", "bench", "cmd/triage-bench", "docker", "deploy/k8s", "Makefile"} {
		err := filepath.WalkDir(filepath.Join("..", dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			switch filepath.Ext(path) {
			case ".sh", ".py", ".ipynb", ".go", ".yaml", ".yml", "":
			default:
				return nil
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, m := range name.FindAllString(string(b), -1) {
				seen[m] = path
			}
			return nil
		})
		require.NoError(t, err)
	}
	require.Contains(t, seen, "TRIAGE_CACHE_DIR", "the scan found setup.sh's variable")
	for n, where := range seen {
		require.True(t, settings[n] || slices.Contains(ToolVars, n),
			"%s (in %s) is neither a setting nor in config.ToolVars: the gateway would refuse to start where it is set", n, where)
	}
	for _, n := range ToolVars {
		require.Contains(t, seen, n, "config.ToolVars lists %s, which no tool reads any more", n)
		require.False(t, settings[n], "%s is a setting, not a tool's variable", n)
	}
}

func TestToolVarsDoNotStopTheGateway(t *testing.T) {
	var cfg Config
	require.NoError(t, applyEnv(&cfg, []string{"TRIAGE_CACHE_DIR=/tmp/x", "TRIAGE_DATA=rows.jsonl"}))
	require.ErrorContains(t, applyEnv(&cfg, []string{"TRIAGE_CACHE_DIRS=/tmp/x"}), "TRIAGE_CACHE_DIRS: unknown variable")
}
