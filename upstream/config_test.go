package upstream

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func validPoolConfig() PoolConfig {
	cfg := DefaultPoolConfig()
	cfg.Name = "slow"
	cfg.Model = "llama"
	cfg.Replicas = []ReplicaConfig{{URL: "http://10.0.0.1:8000"}, {URL: "https://10.0.0.2:8000/base", ID: "b", Weight: 2}}
	return cfg
}

func TestDefaultPoolConfig(t *testing.T) {
	cfg := DefaultPoolConfig()
	require.Equal(t, "/health", cfg.HealthCheck.Path)
	require.Equal(t, 5*time.Second, cfg.HealthCheck.Interval.Std())
	require.Equal(t, time.Second, cfg.HealthCheck.Timeout.Std())
	require.Equal(t, 2, cfg.HealthCheck.UnhealthyAfter)
	require.Equal(t, 1, cfg.HealthCheck.HealthyAfter)
	require.Equal(t, 3, cfg.PassiveEjection.ConsecutiveFailures)
	require.Equal(t, 10*time.Second, cfg.PassiveEjection.Cooldown.Std())
	require.Equal(t, 2*time.Second, cfg.ScrapeInterval.Std())
	require.Equal(t, 2*time.Second, cfg.Timeouts.Connect.Std())
	require.Equal(t, 20*time.Second, cfg.Timeouts.FirstByte.Std())
	require.Equal(t, 60*time.Second, cfg.Timeouts.StreamIdle.Std())
	require.Zero(t, cfg.MaxInFlightPerReplica)

	valid := validPoolConfig()
	require.NoError(t, valid.Validate())
}

func TestPoolConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*PoolConfig)
		want   []string // each must appear in the error
	}{
		{"missing name", func(c *PoolConfig) { c.Name = " " }, []string{"name: required"}},
		{"no replicas", func(c *PoolConfig) { c.Replicas = nil }, []string{"replicas: at least one"}},
		{"bad url", func(c *PoolConfig) { c.Replicas[1].URL = "x" }, []string{`replicas[1].url: invalid URL "x"`}},
		{"empty url", func(c *PoolConfig) { c.Replicas[0].URL = "" }, []string{`replicas[0].url: required`}},
		{"url scheme", func(c *PoolConfig) { c.Replicas[0].URL = "ftp://h:1" }, []string{`replicas[0].url: invalid URL "ftp://h:1"`}},
		{"url query", func(c *PoolConfig) { c.Replicas[0].URL = "http://h:1/?a=b" }, []string{`replicas[0].url`, "no query"}},
		{"duplicate id", func(c *PoolConfig) { c.Replicas[0].ID = "b" }, []string{`replicas[1].id: duplicate replica id "b" (also replicas[0])`}},
		{"duplicate default id", func(c *PoolConfig) { c.Replicas[0].ID = ""; c.Replicas[1].ID = c.Name + "-0" }, []string{`replicas[1].id: duplicate`}},
		{"negative weight", func(c *PoolConfig) { c.Replicas[0].Weight = -1 }, []string{"replicas[0].weight"}},
		{"bad header", func(c *PoolConfig) { c.Replicas[0].Headers = map[string]string{"Bad Name": "v", "Ok": "a\nb"} },
			[]string{`replicas[0].headers: header name "Bad Name" is not an RFC 9110 token`, `replicas[0].headers: header Ok: byte 0x0a at offset 1`}},
		{"health path", func(c *PoolConfig) { c.HealthCheck.Path = "health" }, []string{"health_check.path"}},
		{"health timeout over interval", func(c *PoolConfig) { c.HealthCheck.Timeout = Duration(time.Minute) }, []string{"health_check.timeout: must not exceed"}},
		{"health thresholds", func(c *PoolConfig) { c.HealthCheck.UnhealthyAfter, c.HealthCheck.HealthyAfter = 0, 0 },
			[]string{"health_check.unhealthy_after", "health_check.healthy_after"}},
		{"negative interval", func(c *PoolConfig) { c.HealthCheck.Interval = Duration(-time.Second) }, []string{"health_check.interval"}},
		{"ejection", func(c *PoolConfig) { c.PassiveEjection = PassiveEjectionConfig{ConsecutiveFailures: -1} },
			[]string{"passive_ejection.consecutive_failures"}},
		{"ejection cooldown", func(c *PoolConfig) { c.PassiveEjection.Cooldown = 0 }, []string{"passive_ejection.cooldown"}},
		{"scrape", func(c *PoolConfig) { c.ScrapeInterval = Duration(-1) }, []string{"scrape_interval"}},
		{"zero timeouts", func(c *PoolConfig) { c.Timeouts = TimeoutsConfig{} },
			[]string{"timeouts.connect", "timeouts.first_byte", "timeouts.stream_idle"}},
		{"max in flight", func(c *PoolConfig) { c.MaxInFlightPerReplica = -2 }, []string{"max_in_flight_per_replica"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := validPoolConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			require.Error(t, err)
			for _, w := range tt.want {
				require.Contains(t, err.Error(), w)
			}
		})
	}
}

func TestPoolConfigValidateCollectsEverything(t *testing.T) {
	var cfg PoolConfig // nothing set, not even defaults
	err := cfg.Validate()
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	require.GreaterOrEqual(t, len(lines), 6, err.Error())
	require.Contains(t, err.Error(), "health_check.path")
}

func TestDisabledFeaturesNeedNoSettings(t *testing.T) {
	cfg := validPoolConfig()
	cfg.HealthCheck = HealthCheckConfig{Path: "/health"} // interval 0: off
	cfg.PassiveEjection = PassiveEjectionConfig{}        // 0: off
	cfg.ScrapeInterval = 0
	require.NoError(t, cfg.Validate())
}

// Idle connections are dropped before a uvicorn-served replica (vLLM, SGLang: 5 s keep-alive)
// closes them, so no request is written to a connection the replica is closing.
func TestIdleConnTimeoutIsBelowUvicornsKeepAlive(t *testing.T) {
	cfg := DefaultPoolConfig()
	require.Less(t, cfg.Timeouts.IdleConn.Std(), 5*time.Second)
	require.Equal(t, cfg.Timeouts.IdleConn.Std(), newTransport(cfg.Timeouts).IdleConnTimeout)
	cfg.Name, cfg.Replicas = "p", []ReplicaConfig{{URL: "http://127.0.0.1:1"}}
	cfg.Timeouts.IdleConn = 0
	require.ErrorContains(t, cfg.ValidateAt("pools.fast"), "pools.fast.timeouts.idle_conn: must be > 0")
}
