package upstream

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"strings"
	"time"

	"github.com/triage-gw/triage/upstream/kvevents"
	"github.com/triage-gw/triage/upstream/policy"
)

// PoolConfig describes one pool of interchangeable replicas serving the same
// model (the fast pool or the slow pool).
//
// Start from DefaultPoolConfig and decode over it: several fields use zero to
// mean "disabled" (ScrapeInterval, HealthCheck.Interval,
// PassiveEjection.ConsecutiveFailures, MaxInFlightPerReplica), so a zero
// value cannot also mean "default". Fields whose zero is meaningless
// (timeouts, thresholds) are rejected by Validate rather than defaulted.
type PoolConfig struct {
	// Name labels the pool in metrics, logs and errors ("fast", "slow").
	Name string `yaml:"name" json:"name"`
	// Model is the model name written into the request body's "model" field
	// when a request is sent upstream (see ForwardRequest.SetModel). A
	// replica's own Model overrides it. Empty leaves the body as is.
	Model string `yaml:"model" json:"model"`
	// Replicas are the servers of this pool; at least one is required.
	Replicas []ReplicaConfig `yaml:"replicas" json:"replicas"`
	// HealthCheck configures the active probe.
	HealthCheck HealthCheckConfig `yaml:"health_check" json:"health_check"`
	// PassiveEjection configures ejection after real requests fail.
	PassiveEjection PassiveEjectionConfig `yaml:"passive_ejection" json:"passive_ejection"`
	// ScrapeInterval is how often each replica's /metrics is fetched for the
	// queue-depth, KV-utilisation, token-rate and latency signals (rates and
	// latency means span two scrapes). 0 disables scraping: candidates
	// then carry Fresh=false and zero load. Default 2s.
	ScrapeInterval Duration `yaml:"scrape_interval" json:"scrape_interval"`
	// Timeouts bound each upstream attempt.
	Timeouts TimeoutsConfig `yaml:"timeouts" json:"timeouts"`
	// MaxInFlightPerReplica caps the router-local in-flight count of each
	// replica; a replica at the cap is not a candidate. 0 means unlimited.
	MaxInFlightPerReplica int `yaml:"max_in_flight_per_replica" json:"max_in_flight_per_replica"`
	// Policy picks the replica of each request: the policy's name, its
	// tracing, and each policy's own section. Default least-request.
	Policy policy.Config `yaml:"policy" json:"policy"`
	// Retry says after which failures a request is tried again, how often and
	// where. The default retries only what the replica cannot have executed
	// (see RetryConfig).
	Retry RetryConfig `yaml:"retry" json:"retry"`
	// Disaggregation configures the prefill/decode hand-off of a pool with
	// replicas of role prefill; ignored otherwise.
	Disaggregation DisaggregationConfig `yaml:"disaggregation" json:"disaggregation"`
	// Admission decides whether a request may enter the pool at all.
	// Default always-admit.
	Admission AdmissionConfig `yaml:"admission" json:"admission"`
	// Prices are what this pool's tokens cost per million, for the cost
	// counters. Nil (the default) means no cost counters for this pool.
	Prices *Prices `yaml:"prices,omitempty" json:"prices,omitempty"`
	// AskStreamUsage has the gateway ask the replicas for a usage chunk
	// (stream_options.include_usage) on streams whose client did not, and
	// drop that chunk before the client sees it, so every stream's tokens
	// are counted. Turn it off for servers that refuse stream_options; such
	// streams are then counted in triage_upstream_unmetered_total. Default
	// true.
	AskStreamUsage bool `yaml:"ask_stream_usage" json:"ask_stream_usage"`
	// Engine is the inference engine the replicas run, which says the names
	// of the /metrics families the scraper reads: "vllm", "sglang",
	// "llamacpp" (llama-server --metrics) or "tgi"; "auto" (the default, also
	// when empty) reads each scrape with the one engine whose load gauges it
	// holds. A replica's own Engine overrides it. See docs/engines.md.
	Engine string `yaml:"engine" json:"engine"`
	// KVEvents is how the pool routes on its replicas' KV-cache events
	// (those replicas with kv_events); see KVEventsConfig.
	KVEvents KVEventsConfig `yaml:"kv_events" json:"kv_events"`
	// APIs are the request shapes the replicas speak natively (see KnownAPIs): a Messages
	// request to a pool without "messages" is translated to a chat completion, a Responses
	// request to one without "responses" is refused. Must include "chat". Default all four,
	// what vLLM serves.
	APIs []string `yaml:"apis" json:"apis"`
}

// ReplicaConfig describes one upstream server.
type ReplicaConfig struct {
	// URL is the base URL ("http://10.0.0.7:8000"); request paths such as
	// "/v1/chat/completions" are appended to its path. Credentials in it
	// ("http://user:pass@host") become Basic auth unless Headers sets
	// Authorization.
	URL string `yaml:"url" json:"url"`
	// ID names the replica in metrics, headers (x-router-replica), error
	// messages and the admin API. Empty means "<pool name>-<index>" ("fast-0"):
	// never the URL, so clients are not told internal addresses.
	ID string `yaml:"id" json:"id"`
	// Model overrides the pool's Model for this replica.
	Model string `yaml:"model" json:"model"`
	// Headers are set on every request to this replica (forwarded requests,
	// health checks and scrapes), replacing any header of the same name.
	// Typical use: {"Authorization": "Bearer sk-..."}.
	Headers map[string]string `yaml:"headers" json:"-"`
	// Weight is handed to pickers in Candidate.Weight. 0 (unset) means 1.
	Weight float64 `yaml:"weight" json:"weight"`
	// KVEvents subscribes to the replica's KV-cache events (vLLM
	// --kv-events-config), so the prefix-aware policies score it by what
	// its engine reports holding instead of guessing. Nil: no events.
	KVEvents *kvevents.Config `yaml:"kv_events,omitempty" json:"kv_events,omitempty"`
	// Engine overrides the pool's Engine for this replica. Empty: the
	// pool's.
	Engine string `yaml:"engine" json:"engine"`
	// Role is the replica's part in a disaggregated pool: "prefill" (takes
	// only prefill legs), "decode" (decode legs and whole requests) or "both"
	// (the same as decode; a replica of a pool that is not disaggregated).
	// Empty means "both". See DisaggregationConfig.
	Role string `yaml:"role" json:"role"`
}

// HealthCheckConfig configures the active health probe: GET Path on each
// replica every Interval; a 2xx answer within Timeout is a pass.
type HealthCheckConfig struct {
	// Path is probed with GET. Default "/health", which vLLM, SGLang and
	// mockllm serve (vLLM answers 200 once the engine is up).
	Path string `yaml:"path" json:"path"`
	// Interval between probes. 0 disables active checks: replicas are then
	// always considered passing and only passive ejection removes them.
	// Default 5s.
	Interval Duration `yaml:"interval" json:"interval"`
	// Timeout for one probe; must not exceed Interval. Default 1s.
	Timeout Duration `yaml:"timeout" json:"timeout"`
	// UnhealthyAfter consecutive failed probes mark a replica unhealthy.
	// Default 2.
	UnhealthyAfter int `yaml:"unhealthy_after" json:"unhealthy_after"`
	// HealthyAfter consecutive passing probes mark it healthy again.
	// Default 1.
	HealthyAfter int `yaml:"healthy_after" json:"healthy_after"`
}

// PassiveEjectionConfig ejects a replica after real requests fail.
type PassiveEjectionConfig struct {
	// ConsecutiveFailures in a row (connect error, failure before the first
	// response byte, first-byte or stream-idle timeout, mid-stream error, a
	// 5xx status other than a busy 503 with Retry-After, or an answer slower
	// than SlowFirstByte) eject the replica for Cooldown. A busy answer (429,
	// or 503 with Retry-After) and the caller's own faults never count. After the cooldown the
	// replica is on probation: one more failure ejects it again at once, one
	// success clears the count. 0 disables passive ejection. Default 3.
	ConsecutiveFailures int `yaml:"consecutive_failures" json:"consecutive_failures"`
	// Cooldown is how long an ejected replica receives no requests.
	// Default 10s.
	Cooldown Duration `yaml:"cooldown" json:"cooldown"`
	// SlowFirstByte, when > 0, counts an answer whose headers arrived later
	// than this as a failure toward ejection (the answer itself is still
	// delivered), so a replica that is slow without timing out is seen. A
	// busy answer (429, or 503 with Retry-After) never counts. 0 (the default)
	// leaves slowness to timeouts.first_byte.
	SlowFirstByte Duration `yaml:"slow_first_byte" json:"slow_first_byte"`
}

// TimeoutsConfig bounds one upstream attempt.
type TimeoutsConfig struct {
	// Connect bounds dialing (and the TLS handshake). Default 2s.
	Connect Duration `yaml:"connect" json:"connect"`
	// FirstByte bounds the wait from sending the request to receiving the
	// response headers. A replica that passes it counts as failed (passive
	// ejection); it must be shorter than server.request_timeout, or that fires
	// first and a replica that never answers is never seen. Default 20s.
	FirstByte Duration `yaml:"first_byte" json:"first_byte"`
	// StreamIdle bounds each wait for more response body bytes. Default 60s.
	StreamIdle Duration `yaml:"stream_idle" json:"stream_idle"`
	// IdleConn is how long an idle connection to a replica is kept for reuse. It must be
	// below the replicas' own keep-alive timeout: a replica that closes an idle connection
	// just as the gateway sends a request on it makes that request fail after it was
	// written, which is not retried by default (the replica may have read it). vLLM and
	// SGLang serve with uvicorn, whose keep-alive is 5s. Default 4s.
	IdleConn Duration `yaml:"idle_conn" json:"idle_conn"`
}

// DefaultPoolConfig returns a PoolConfig holding every default. Name, Model
// and Replicas are left for the caller.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{
		Policy:    policy.DefaultConfig(),
		Admission: DefaultAdmissionConfig(),
		Retry:     DefaultRetryConfig(),

		Disaggregation: DefaultDisaggregationConfig(),
		HealthCheck: HealthCheckConfig{
			Path:           "/health",
			Interval:       Duration(5 * time.Second),
			Timeout:        Duration(time.Second),
			UnhealthyAfter: 2,
			HealthyAfter:   1,
		},
		PassiveEjection: PassiveEjectionConfig{
			ConsecutiveFailures: 3,
			Cooldown:            Duration(10 * time.Second),
		},
		ScrapeInterval: Duration(2 * time.Second),
		Engine:         EngineAuto,
		AskStreamUsage: true,
		KVEvents:       DefaultKVEventsConfig(),
		APIs:           DefaultAPIs(),
		Timeouts: TimeoutsConfig{
			Connect:    Duration(2 * time.Second),
			FirstByte:  Duration(20 * time.Second),
			StreamIdle: Duration(60 * time.Second),
			IdleConn:   Duration(4 * time.Second),
		},
	}
}

// Validate is ValidateAt("pool").
func (c *PoolConfig) Validate() error { return c.ValidateAt("pool") }

// ValidateAt reports every problem in c, each naming its field from path
// ("pools.fast.replicas[1].url: ..."), joined with errors.Join. It never
// corrects a value. The policy and admission sections are validated too.
func (c *PoolConfig) ValidateAt(path string) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s.%s: %s", path, field, fmt.Sprintf(format, args...)))
	}

	if strings.TrimSpace(c.Name) == "" {
		bad("name", "required")
	}
	if len(c.Replicas) == 0 {
		bad("replicas", "at least one replica is required")
	}
	seen := make(map[string]int, len(c.Replicas))
	for i, r := range c.Replicas {
		field := fmt.Sprintf("replicas[%d]", i)
		if _, err := parseReplicaURL(r.URL); err != nil {
			bad(field+".url", "%v", err)
		}
		id := replicaID(c.Name, i, r)
		if strings.ContainsAny(id, " \t\r\n") {
			bad(field+".id", "must not contain whitespace, got %q", id)
		}
		if id != "" {
			if j, dup := seen[id]; dup {
				bad(field+".id", "duplicate replica id %q (also replicas[%d])", id, j)
			} else {
				seen[id] = i
			}
		}
		if math.IsNaN(r.Weight) || math.IsInf(r.Weight, 0) || r.Weight < 0 {
			bad(field+".weight", "must be a finite number >= 0 (0 means 1), got %v", r.Weight)
		}
		for name, value := range r.Headers {
			if err := CheckHeader(name, value); err != nil {
				bad(field+".headers", "%v", err)
			}
		}
		if !validEngine(r.Engine) {
			bad(field+".engine", "replica %q: unknown engine %q (want %s, or empty for the pool's)", id, r.Engine, engineChoices())
		}
		if r.KVEvents != nil {
			errs = append(errs, r.KVEvents.ValidateAt(path+"."+field+".kv_events"))
		}
	}

	hc := c.HealthCheck
	if !strings.HasPrefix(hc.Path, "/") {
		bad("health_check.path", "must start with \"/\", got %q", hc.Path)
	}
	if hc.Interval < 0 {
		bad("health_check.interval", "must be >= 0 (0 disables active checks), got %s", hc.Interval)
	}
	if hc.Interval > 0 {
		if hc.Timeout <= 0 {
			bad("health_check.timeout", "must be > 0, got %s", hc.Timeout)
		} else if hc.Timeout > hc.Interval {
			bad("health_check.timeout", "must not exceed health_check.interval (%s), got %s", hc.Interval, hc.Timeout)
		}
		if hc.UnhealthyAfter < 1 {
			bad("health_check.unhealthy_after", "must be >= 1, got %d", hc.UnhealthyAfter)
		}
		if hc.HealthyAfter < 1 {
			bad("health_check.healthy_after", "must be >= 1, got %d", hc.HealthyAfter)
		}
	}

	pe := c.PassiveEjection
	if pe.ConsecutiveFailures < 0 {
		bad("passive_ejection.consecutive_failures", "must be >= 0 (0 disables ejection), got %d", pe.ConsecutiveFailures)
	}
	if pe.ConsecutiveFailures > 0 && pe.Cooldown <= 0 {
		bad("passive_ejection.cooldown", "must be > 0, got %s", pe.Cooldown)
	}
	if pe.SlowFirstByte < 0 {
		bad("passive_ejection.slow_first_byte", "must be >= 0 (0 disables it), got %s", pe.SlowFirstByte)
	} else if pe.SlowFirstByte > 0 && c.Timeouts.FirstByte > 0 && pe.SlowFirstByte >= c.Timeouts.FirstByte {
		bad("passive_ejection.slow_first_byte", "must be below timeouts.first_byte (%s), got %s", c.Timeouts.FirstByte, pe.SlowFirstByte)
	}

	if !validEngine(c.Engine) {
		bad("engine", "unknown engine %q (want %s)", c.Engine, engineChoices())
	}
	if c.ScrapeInterval < 0 {
		bad("scrape_interval", "must be >= 0 (0 disables scraping), got %s", c.ScrapeInterval)
	}
	if c.Timeouts.Connect <= 0 {
		bad("timeouts.connect", "must be > 0, got %s", c.Timeouts.Connect)
	}
	if c.Timeouts.FirstByte <= 0 {
		bad("timeouts.first_byte", "must be > 0, got %s", c.Timeouts.FirstByte)
	}
	if c.Timeouts.IdleConn <= 0 {
		bad("timeouts.idle_conn", "must be > 0, got %s", c.Timeouts.IdleConn)
	}
	if c.Timeouts.StreamIdle <= 0 {
		bad("timeouts.stream_idle", "must be > 0, got %s", c.Timeouts.StreamIdle)
	}
	if c.MaxInFlightPerReplica < 0 {
		bad("max_in_flight_per_replica", "must be >= 0 (0 means unlimited), got %d", c.MaxInFlightPerReplica)
	}
	validateAPIs(c.APIs, bad)
	if c.Prices != nil {
		errs = append(errs, c.Prices.ValidateAt(path+".prices"))
	}
	errs = append(errs, c.Policy.ValidateAt(path+".policy"), c.Admission.ValidateAt(path+".admission"),
		c.Retry.ValidateAt(path+".retry"), c.KVEvents.ValidateAt(path+".kv_events"), c.validateDisaggregation(path))
	return errors.Join(errs...)
}

// replicaID is the replica's configured id, or "<pool>-<index>".
func replicaID(pool string, index int, rc ReplicaConfig) string {
	if rc.ID != "" {
		return rc.ID
	}
	return fmt.Sprintf("%s-%d", pool, index)
}

// parseReplicaURL accepts an absolute http or https URL with a host and no
// query or fragment (a base that paths are appended to).
func parseReplicaURL(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("required")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("invalid URL %q (want http://host:port or https://host:port)", raw)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("invalid URL %q (a base URL takes no query or fragment)", raw)
	}
	return u, nil
}
