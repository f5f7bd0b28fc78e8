package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// noEnv keeps the test process's own environment out of Load.
var noEnv = []string{}

func writeFile(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "triage.yaml")
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// simulated is DefaultConfig with sim.enabled: what --simulate alone loads to.
func simulated() Config {
	c := DefaultConfig()
	c.Sim.Enabled = true
	return c
}

func TestDefaultsAreValidOnlyWithReplicasOrSimulated(t *testing.T) {
	err := DefaultConfig().Validate()
	require.Error(t, err, "no replicas and no sim.enabled must not validate")
	require.Contains(t, err.Error(), `pools.fast.replicas: pool "fast" has no replica`)
	require.Contains(t, err.Error(), `pools.slow.replicas: pool "slow" has no replica`)
	require.Contains(t, err.Error(), "--simulate")
	require.NoError(t, simulated().Validate())
	require.True(t, DefaultConfig().Pools.Empty())
}

// The black-box finding behind fail-closed: a config file that sets pool options but whose
// replicas went missing used to start the simulators and answer with made-up text.
func TestConfigWithoutReplicasFailsClosed(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  Sources
		want []string
	}{
		{"no configuration at all", Sources{Environ: noEnv}, []string{"pools.fast.replicas", "pools.slow.replicas"}},
		{"pool options but no replica", Sources{Environ: noEnv, File: writeFile(t,
			"pools:\n  fast: {model: small}\n  slow: {model: big}\n")},
			[]string{`pool "fast" has no replica`, `pool "slow" has no replica`}},
		{"one pool only", Sources{Environ: noEnv, File: writeFile(t,
			"pools:\n  fast:\n    replicas: [{url: \"http://10.0.0.1:8000\"}]\n")},
			[]string{`pool "slow" has no replica`}},
		{"env names a pool model only", Sources{Environ: []string{"TRIAGE_POOLS_SLOW_MODEL=big"}},
			[]string{"pools.fast.replicas", "pools.slow.replicas"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(tc.src)
			require.Error(t, err)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestSimulatedPoolsOnlyWhenAskedFor(t *testing.T) {
	cfg, err := Load(Sources{Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, simulated(), cfg, "--simulate alone is the defaults with sim.enabled")

	cfg, err = Load(Sources{Environ: noEnv, File: writeFile(t, "sim:\n  enabled: true\n")})
	require.NoError(t, err)
	require.True(t, cfg.Sim.Enabled)

	cfg, err = Load(Sources{Environ: []string{"TRIAGE_SIM_ENABLED=true"}})
	require.NoError(t, err)
	require.True(t, cfg.Sim.Enabled)

	// Never both: real replicas would be ignored, or simulated ones mixed in.
	_, err = Load(Sources{Environ: noEnv, Simulate: true, File: writeFile(t,
		"pools:\n  fast:\n    replicas: [{url: \"http://10.0.0.1:8000\"}]\n  slow:\n    replicas: [{url: \"http://10.0.0.2:8000\"}]\n")})
	require.ErrorContains(t, err, "sim.enabled: the built-in simulated pools cannot be combined with configured replicas")
}

func TestExampleLoadsToExactlyTheDefaults(t *testing.T) {
	cfg, err := Load(Sources{File: "example.yaml", Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, simulated(), cfg, "config/example.yaml and DefaultConfig() disagree: update the example")

	// The embedded copy is the same file.
	disk, err := os.ReadFile("example.yaml")
	require.NoError(t, err)
	require.Equal(t, disk, Example)
}

// TestExampleDocumentsEverySetting walks the defaults as YAML and requires every key of
// them in example.yaml, so a new setting cannot go undocumented. Settings whose default is
// an empty map or list must at least be named in the file (a comment suffices).
func TestExampleDocumentsEverySetting(t *testing.T) {
	var def yaml.Node
	b, err := yaml.Marshal(DefaultConfig())
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &def))
	var ex yaml.Node
	require.NoError(t, yaml.Unmarshal(Example, &ex))

	exPaths := map[string]bool{}
	collectPaths(ex.Content[0], "", func(p string, _ *yaml.Node) { exPaths[p] = true })
	collectPaths(def.Content[0], "", func(p string, n *yaml.Node) {
		if exPaths[p] {
			return
		}
		if (n.Kind == yaml.MappingNode || n.Kind == yaml.SequenceNode) && len(n.Content) == 0 {
			key := p[strings.LastIndex(p, ".")+1:]
			require.Contains(t, string(Example), key+":", "example.yaml must mention %s", p)
			return
		}
		t.Errorf("example.yaml does not document %s", p)
	})
}

// collectPaths calls fn for every mapping key under n with its dotted path and value node.
func collectPaths(n *yaml.Node, prefix string, fn func(path string, v *yaml.Node)) {
	if n.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		p := n.Content[i].Value
		if prefix != "" {
			p = prefix + "." + p
		}
		v := n.Content[i+1]
		fn(p, v)
		collectPaths(v, p, fn)
	}
}

func TestEmptyFileKeepsDefaults(t *testing.T) {
	cfg, err := Load(Sources{File: writeFile(t, "# nothing here\n"), Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, simulated(), cfg)
}

func TestFileOverridesDefaultsAndKeepsTheRest(t *testing.T) {
	cfg, err := Load(Sources{File: writeFile(t, `
server:
  listen: 0.0.0.0:9000
batcher:
  max_wait: 20ms
decision:
  alpha: 0.3
pools:
  fast:
    model: small
    replicas: [{url: "http://10.0.0.1:8000"}]
    timeouts: {first_byte: 5s}
  slow:
    replicas: [{url: "http://10.0.0.2:8000", id: big-0, headers: {Authorization: "Bearer sk-1"}}]
`), Environ: noEnv})
	require.NoError(t, err)
	require.Equal(t, "0.0.0.0:9000", cfg.Server.Listen)
	require.Equal(t, 20*time.Millisecond, cfg.Batcher.MaxWait)
	require.Equal(t, 32, cfg.Batcher.MaxBatch, "unset keys keep their defaults")
	require.Equal(t, 0.3, cfg.Decision.Alpha)
	require.Equal(t, 0.5, cfg.Decision.Base)
	require.Equal(t, "small", cfg.Pools.Fast.Model)
	require.Equal(t, upstream.Duration(5*time.Second), cfg.Pools.Fast.Timeouts.FirstByte)
	require.Equal(t, upstream.Duration(2*time.Second), cfg.Pools.Fast.Timeouts.Connect)
	require.Equal(t, "fast", cfg.Pools.Fast.Name)
	require.False(t, cfg.Pools.Empty())
	require.Equal(t, "Bearer sk-1", cfg.Pools.Slow.Replicas[0].Headers["Authorization"])
}

func TestFileErrorsNameTheKeyAndLine(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"unknown key", "server:\n  lisen: 1.2.3.4:5\n", []string{"line 2", "lisen"}},
		{"unknown section", "servr: {}\n", []string{"line 1", "servr"}},
		{"unknown nested key", "pools:\n  fast:\n    timeouts:\n      frist_byte: 1s\n", []string{"line 4", "frist_byte"}},
		{"bare number duration", "batcher:\n  max_wait: 50\n", []string{"line 2", "50"}},
		{"bad upstream duration", "pools:\n  fast:\n    scrape_interval: 2\n", []string{"line 3", "invalid duration"}},
		{"unknown policy section", "pools:\n  fast:\n    policy:\n      prefix_cach: {}\n", []string{"line 4", "prefix_cach", "policy.Config"}},
		{"unknown key in a policy section", "pools:\n  slow:\n    policy:\n      vtc:\n        windw: 1m\n", []string{"line 5", "windw"}},
		{"bad policy duration", "pools:\n  fast:\n    policy:\n      vtc: {window: 60}\n", []string{"line 4", "vtc.window", "invalid duration"}},
		{"wrong type", "server:\n  body_limit: lots\n", []string{"line 2", "lots"}},
		{"duplicate key", "server:\n  listen: a:1\n  listen: b:2\n", []string{"listen", "already defined"}},
		{"two documents", "server: {}\n---\nlog: {}\n", []string{"more than one YAML document"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, tc.body)
			_, err := Load(Sources{File: path, Environ: noEnv})
			require.Error(t, err)
			require.Contains(t, err.Error(), path)
			for _, w := range tc.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestMissingFileIsAnError(t *testing.T) {
	_, err := Load(Sources{File: filepath.Join(t.TempDir(), "nope.yaml"), Environ: noEnv})
	require.ErrorContains(t, err, "nope.yaml")
}

func TestValidationReportsEveryFieldByPath(t *testing.T) {
	_, err := Load(Sources{File: writeFile(t, `
server: {body_limit: 10, request_timeout: 0s}
cache: {max_entries: 0}
batcher: {max_batch: 0}
decision: {alpha: -1}
pools:
  fast: {timeouts: {connect: 0s}, policy: {name: fastest}}
  slow: {admission: {name: maybe}}
sim: {fast_replicas: 0, slow: {jitter: 2}}
admin: {token: short}
log: {level: loud}
classifier: {intra_op_threads: 0}
`), Environ: noEnv})
	require.Error(t, err)
	for _, want := range []string{
		"server.body_limit: must be in [1024",
		"server.request_timeout: must be > 0",
		"cache.max_entries:",
		"batcher.max_batch:",
		"decision.alpha: must be >= 0, got -1",
		"pools.fast.timeouts.connect: must be > 0",
		"pools.fast.policy.name: unknown policy \"fastest\"",
		"pools.slow.admission.name: unknown admission policy \"maybe\"",
		"sim.fast_replicas:",
		"sim.slow.jitter: must be in [0, 1], got 2",
		"admin.token: must be at least 16 bytes",
		"log.level:",
		"classifier.intra_op_threads:",
	} {
		require.Contains(t, err.Error(), want)
	}
}

func TestPoolsConfigureBothOrNeither(t *testing.T) {
	_, err := Load(Sources{File: writeFile(t, "pools:\n  fast:\n    replicas: [{url: \"http://10.0.0.1:8000\"}]\n"), Environ: noEnv})
	require.ErrorContains(t, err, `pools.slow.replicas: pool "slow" has no replica`)

	_, err = Load(Sources{File: writeFile(t, "pools:\n  fast:\n    replicas: [{url: \"ftp://x\"}]\n  slow:\n    replicas: [{url: \"http://10.0.0.2:8000\"}]\n"), Environ: noEnv})
	require.ErrorContains(t, err, "pools.fast.replicas[0].url: invalid URL")

	_, err = Load(Sources{File: writeFile(t, "pools:\n  slow: {name: fast}\n"), Environ: noEnv})
	require.ErrorContains(t, err, "pools.slow.name: must differ")
}

func TestEnvOverridesFileAndFlagOverridesEnv(t *testing.T) {
	path := writeFile(t, "server:\n  listen: 127.0.0.1:7000\ndecision:\n  alpha: 0.2\n")
	env := []string{
		"HOME=/root", // not ours: ignored
		"TRIAGE_DECISION_ALPHA=0.3",
		"TRIAGE_SERVER_LISTEN=127.0.0.1:7001",
		"TRIAGE_BATCHER_MAX_WAIT=10ms",
		"TRIAGE_CACHE_ENABLED=false",
		"TRIAGE_POOLS_SLOW_TIMEOUTS_FIRST_BYTE=5s",
		"TRIAGE_POOLS_FAST_POLICY_NAME=prefix-cache",
		"TRIAGE_SIM_SLOW_DECODE_PER_TOKEN=1ms",
		"TRIAGE_ADMIN_TOKEN=0123456789abcdef0123",
		"TRIAGE_POOLS_FAST_POLICY_RANDOM_SEED=7",
		"TRIAGE_POOLS_SLOW_POLICY_VTC_WINDOW=30s",
		"TRIAGE_POOLS_SLOW_POLICY_TRACE_ENABLED=true",
	}
	cfg, err := Load(Sources{File: path, Environ: env, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, 0.3, cfg.Decision.Alpha)
	require.Equal(t, "127.0.0.1:7001", cfg.Server.Listen)
	require.Equal(t, 10*time.Millisecond, cfg.Batcher.MaxWait)
	require.False(t, cfg.Cache.Enabled)
	require.Equal(t, upstream.Duration(5*time.Second), cfg.Pools.Slow.Timeouts.FirstByte)
	require.Equal(t, "prefix-cache", cfg.Pools.Fast.Policy.Name)
	require.Equal(t, time.Millisecond, cfg.Sim.Slow.DecodePerToken)
	require.Equal(t, "0123456789abcdef0123", cfg.Admin.Token)
	require.Equal(t, uint64(7), policy.SectionOf[policy.RandomConfig](cfg.Pools.Fast.Policy, "random").Seed)
	require.Equal(t, 30*time.Second, policy.SectionOf[policy.VTCConfig](cfg.Pools.Slow.Policy, "vtc").Window)
	require.Equal(t, time.Minute, policy.SectionOf[policy.VTCConfig](cfg.Pools.Fast.Policy, "vtc").Window, "the other pool keeps its own")
	require.True(t, cfg.Pools.Slow.Policy.Trace.Enabled)

	cfg, err = Load(Sources{File: path, Environ: env, Listen: "127.0.0.1:7002", Simulate: true})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:7002", cfg.Server.Listen)
}

func TestConfigFileFromEnv(t *testing.T) {
	path := writeFile(t, "decision:\n  alpha: 0.1\n")
	cfg, err := Load(Sources{Environ: []string{EnvConfigFile + "=" + path}, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, 0.1, cfg.Decision.Alpha)
}

func TestEnvErrorsNameTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env, want string
	}{
		{"TRIAGE_DECISION_ALPA=0.3", "TRIAGE_DECISION_ALPA: unknown variable"},
		{"TRIAGE_POOLS_FAST_REPLICAS=http://x", "TRIAGE_POOLS_FAST_REPLICAS: unknown variable"},
		{"TRIAGE_DECISION_ALPHA=abc", `TRIAGE_DECISION_ALPHA: invalid value "abc" for decision.alpha: want a finite number`},
		{"TRIAGE_DECISION_ALPHA=NaN", "TRIAGE_DECISION_ALPHA: invalid value"},
		{"TRIAGE_BATCHER_MAX_WAIT=50", "TRIAGE_BATCHER_MAX_WAIT: invalid value \"50\" for batcher.max_wait: want a duration"},
		{"TRIAGE_POOLS_FAST_SCRAPE_INTERVAL=2", "TRIAGE_POOLS_FAST_SCRAPE_INTERVAL: invalid value \"2\""},
		{"TRIAGE_CACHE_ENABLED=maybe", "TRIAGE_CACHE_ENABLED: invalid value \"maybe\" for cache.enabled: want true or false"},
		{"TRIAGE_SERVER_BODY_LIMIT=1.5", "TRIAGE_SERVER_BODY_LIMIT: invalid value"},
		{"TRIAGE_POOLS_FAST_POLICY_RANDOM_SEED=-1", "TRIAGE_POOLS_FAST_POLICY_RANDOM_SEED: invalid value"},
		{"TRIAGE_POOLS_FAST_POLICY_VTC_WINDOW=60", `TRIAGE_POOLS_FAST_POLICY_VTC_WINDOW: invalid value "60" for pools.fast.policy.vtc.window: want a duration`},
		{"TRIAGE_POOLS_FAST_POLICY_PREFIX_CACHE_BLOCK_CHARS=0", "pools.fast.policy.prefix_cache.block_chars: must be >= 1, got 0"},
		{"TRIAGE_DECISION_ALPHA=-1", "decision.alpha: must be >= 0, got -1"}, // parses, then fails validation
	} {
		t.Run(tc.env, func(t *testing.T) {
			_, err := Load(Sources{Environ: []string{tc.env}})
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestEnvVarsAreUniqueAndDocumented(t *testing.T) {
	vars := EnvVars()
	seen := map[string]string{}
	for _, v := range vars {
		require.True(t, strings.HasPrefix(v.Name, EnvPrefix), v.Name)
		if prev, dup := seen[v.Name]; dup {
			t.Fatalf("%s names both %s and %s", v.Name, prev, v.Path)
		}
		seen[v.Name] = v.Path
	}
	require.Equal(t, "server.listen", seen["TRIAGE_SERVER_LISTEN"])
	require.Equal(t, "decision.alpha", seen["TRIAGE_DECISION_ALPHA"])
	require.Equal(t, "admin.token", seen["TRIAGE_ADMIN_TOKEN"])
	require.Equal(t, "pools.fast.name", seen["TRIAGE_POOLS_FAST_NAME"], "inlined upstream.PoolConfig fields sit directly under the pool")
	require.NotContains(t, seen, EnvConfigFile)

	defaults := map[string]string{}
	for _, v := range vars {
		defaults[v.Name] = v.Default
	}
	require.Equal(t, "50ms", defaults["TRIAGE_BATCHER_MAX_WAIT"])
	require.Equal(t, "20s", defaults["TRIAGE_POOLS_SLOW_TIMEOUTS_FIRST_BYTE"])
	require.Equal(t, "0.45", defaults["TRIAGE_DECISION_ALPHA"])
	require.Equal(t, "1m0s", defaults["TRIAGE_POOLS_FAST_POLICY_VTC_WINDOW"])
	require.Equal(t, "128", defaults["TRIAGE_POOLS_SLOW_POLICY_PREFIX_CACHE_BLOCK_CHARS"])
	require.Equal(t, "pools.fast.policy.lmetric.variant", seen["TRIAGE_POOLS_FAST_POLICY_LMETRIC_VARIANT"])

	// Every variable round-trips its own default.
	var env []string
	for _, v := range vars {
		env = append(env, v.Name+"="+v.Default)
	}
	cfg, err := Load(Sources{Environ: env, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, simulated(), cfg)
}

func TestPrintedConfigIsRedactedAndLoadsBack(t *testing.T) {
	cfg := simulated()
	cfg.Admin.Token = "0123456789abcdef-secret"
	cfg.Pools.Fast.Replicas = []upstream.ReplicaConfig{{URL: "http://user:pw@10.0.0.1:8000", Headers: map[string]string{"Authorization": "Bearer sk-live"}}}
	cfg.Pools.Slow.Replicas = []upstream.ReplicaConfig{{URL: "http://10.0.0.2:8000"}}
	out, err := cfg.YAML()
	require.NoError(t, err)
	s := string(out)
	require.NotContains(t, s, "secret")
	require.NotContains(t, s, "sk-live")
	require.NotContains(t, s, ":pw@")
	require.Contains(t, s, redactedValue)
	require.Equal(t, "Bearer sk-live", cfg.Pools.Fast.Replicas[0].Headers["Authorization"], "Redacted must not touch the original")

	// Without secrets, what is printed loads back to the same configuration.
	cfg = simulated()
	out, err = cfg.YAML()
	require.NoError(t, err)
	back, err := Load(Sources{File: writeFile(t, string(out)), Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, cfg, back)
}

// TestPrintedPolicyLoadsBack prints pools whose policies differ from the defaults in every
// kind of setting (name, a section's scalar, duration and map, tracing) and loads it back.
func TestPrintedPolicyLoadsBack(t *testing.T) {
	cfg := simulated()
	p := &cfg.Pools.Slow.Policy
	p.Name = "weighted"
	p.Trace.Enabled = true
	w := policy.SectionOf[policy.WeightedConfig](*p, "weighted")
	w.Scorers = map[string]float64{"load-balance": 2, "kv-utilization": 1}
	require.NoError(t, p.SetSection("weighted", w))
	v := policy.SectionOf[policy.VTCConfig](*p, "vtc")
	v.Window = 90 * time.Second
	require.NoError(t, p.SetSection("vtc", v))

	out, err := cfg.YAML()
	require.NoError(t, err)
	back, err := Load(Sources{File: writeFile(t, string(out)), Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, cfg, back)
}

// A model name cannot both route (an alias) and pin (a pool's model).
func TestModelAliasMustNotBeAPoolsModel(t *testing.T) {
	cfg := simulated()
	cfg.Pools.Slow.Model = "auto"
	require.ErrorContains(t, cfg.Validate(), `routing.model_aliases[0]: "auto" is also a model of pools.slow`)
	cfg = simulated()
	cfg.Pools.Fast.Replicas = []upstream.ReplicaConfig{{URL: "http://127.0.0.1:1", Model: "router"}}
	cfg.Pools.Slow.Replicas = []upstream.ReplicaConfig{{URL: "http://127.0.0.1:2"}}
	cfg.Routing.ModelAliases = []string{"auto", "router"}
	require.ErrorContains(t, cfg.Validate(), `routing.model_aliases[1]: "router" is also a model of pools.fast`)
	cfg.Routing.ModelAliases = []string{"auto"}
	require.NoError(t, cfg.Validate())
}

// fleet.budget was renamed fleet.slots ("budget" is a time limit only): the old key and its
// TRIAGE_ variables still load, each reported once, and spelling both is an error.
func TestRenamedKeysStillLoad(t *testing.T) {
	type dep struct{ old, new string }
	load := func(src Sources) (Config, []dep, error) {
		var got []dep
		src.Simulate = true
		src.Deprecated = func(old, new string) { got = append(got, dep{old, new}) }
		cfg, err := Load(src)
		return cfg, got, err
	}
	cfg, got, err := load(Sources{Environ: noEnv, File: writeFile(t, "fleet:\n  budget:\n    headroom: 3\n")})
	require.NoError(t, err)
	require.Equal(t, 3, cfg.Fleet.Slots.Headroom)
	require.Equal(t, []dep{{"fleet.budget", "fleet.slots"}}, got)

	cfg, got, err = load(Sources{Environ: []string{"TRIAGE_FLEET_BUDGET_HEADROOM=5"}})
	require.NoError(t, err)
	require.Equal(t, 5, cfg.Fleet.Slots.Headroom)
	require.Equal(t, []dep{{"TRIAGE_FLEET_BUDGET_HEADROOM", "TRIAGE_FLEET_SLOTS_HEADROOM"}}, got)

	cfg, got, err = load(Sources{Environ: []string{"TRIAGE_FLEET_SLOTS_HEADROOM=6"}, File: writeFile(t, "fleet:\n  slots:\n    headroom: 4\n")})
	require.NoError(t, err)
	require.Equal(t, 6, cfg.Fleet.Slots.Headroom)
	require.Empty(t, got, "the new names are not deprecated")

	_, _, err = load(Sources{Environ: noEnv, File: writeFile(t, "fleet:\n  slots:\n    headroom: 4\n  budget:\n    headroom: 3\n")})
	require.ErrorContains(t, err, "line 4: fleet.budget: renamed to fleet.slots, which line 2 sets too")
	_, _, err = load(Sources{Environ: []string{"TRIAGE_FLEET_BUDGET_HEADROOM=5", "TRIAGE_FLEET_SLOTS_HEADROOM=6"}})
	require.ErrorContains(t, err, "TRIAGE_FLEET_BUDGET_HEADROOM: renamed to TRIAGE_FLEET_SLOTS_HEADROOM, which is set too")
}

// A replica that never answers must be ejected by the first-byte timeout before the request
// times out.
func TestFirstByteMustBeShorterThanTheRequestTimeout(t *testing.T) {
	cfg := simulated()
	cfg.Server.RequestTimeout = 30 * time.Second
	cfg.Pools.Slow.Timeouts.FirstByte = upstream.Duration(time.Minute)
	err := cfg.Validate()
	require.ErrorContains(t, err, "pools.slow.timeouts.first_byte: must be below server.request_timeout (30s), got 1m0s")
}

// TestPricesAreCheckedAtStartup: a pool's prices are both given, finite and >= 0, or the
// gateway does not start; the error names each bad field. Without prices a pool has no cost
// counters, which is not an error.
func TestPricesAreCheckedAtStartup(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"negative", "pools:\n  fast:\n    prices: {input_per_million: -0.1, output_per_million: 0.4}\n",
			[]string{"pools.fast.prices.input_per_million: must be a finite number >= 0, got -0.1"}},
		{"one missing", "pools:\n  slow:\n    prices: {input_per_million: 2.5}\n",
			[]string{"pools.slow.prices.output_per_million: required when pools.slow.prices is set"}},
		{"empty section", "pools:\n  slow:\n    prices: {}\n",
			[]string{"pools.slow.prices.input_per_million: required", "pools.slow.prices.output_per_million: required"}},
		{"not a number", "pools:\n  fast:\n    prices: {input_per_million: cheap, output_per_million: 1}\n",
			[]string{"line 3", "cheap"}}, // the loader's wrong-type message: line and value
		{"unknown key", "pools:\n  fast:\n    prices: {input: 1, output_per_million: 1}\n",
			[]string{"input"}},
		{"NaN", "pools:\n  fast:\n    prices: {input_per_million: .nan, output_per_million: 1}\n",
			[]string{"pools.fast.prices.input_per_million: must be a finite number >= 0, got NaN"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(Sources{File: writeFile(t, tt.yaml), Environ: noEnv})
			require.Error(t, err)
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
		})
	}

	cfg, err := Load(Sources{File: writeFile(t, "pools:\n  fast:\n    prices: {input_per_million: 0, output_per_million: 0.6}\n"), Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, 0.0, *cfg.Pools.Fast.Prices.InputPerMillion, "a free model is allowed")
	require.Equal(t, 0.6, *cfg.Pools.Fast.Prices.OutputPerMillion)
	require.Nil(t, cfg.Pools.Slow.Prices, "absent prices stay absent")
}

// The binary runs from any directory: classifier paths written in a config file are relative
// to the file, and the defaults are found under the install root when the working directory
// lacks them.
func TestClassifierPathsResolveFromTheFileAndTheInstallRoot(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "triage.yaml")
	require.NoError(t, os.WriteFile(file, []byte("classifier:\n  model_dir: my-models\n  onnxruntime_lib: /opt/ort/libonnxruntime.so\n"), 0o600))
	cfg, err := Load(Sources{File: file, Environ: noEnv, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "my-models"), cfg.Classifier.ModelDir, "relative to the file")
	require.Equal(t, "/opt/ort/libonnxruntime.so", cfg.Classifier.ORTLibrary, "absolute stays")
	require.Equal(t, DefaultConfig().Classifier.EncoderDir, cfg.Classifier.EncoderDir, "a default is not the file's")

	// An environment override is the operator's word, relative to the working directory.
	cfg, err = Load(Sources{File: file, Environ: []string{"TRIAGE_CLASSIFIER_MODEL_DIR=env-models"}, Simulate: true})
	require.NoError(t, err)
	require.Equal(t, "env-models", cfg.Classifier.ModelDir)

	// The working directory (this package's folder) has no models/: the install root's wins.
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "models"), 0o755))
	cfg, err = Load(Sources{Environ: noEnv, Simulate: true, InstallRoot: root})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "models"), cfg.Classifier.ModelDir)
	require.Equal(t, DefaultConfig().Classifier.ORTLibrary, cfg.Classifier.ORTLibrary, "missing in both: left for the classifier to report")
}
