package upstream

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/triage-gw/triage/upstream/policy"
)

// HealthState is a replica's state as the admin API shows it. Draining wins
// over Unhealthy, which wins over Ejected.
type HealthState string

const (
	// StateHealthy replicas take new requests.
	StateHealthy HealthState = "healthy"
	// StateUnhealthy replicas failed their active health checks.
	StateUnhealthy HealthState = "unhealthy"
	// StateEjected replicas failed real requests and sit out a cooldown.
	StateEjected HealthState = "ejected"
	// StateDraining replicas were drained by an operator: they finish what
	// they hold and take nothing new until undrained.
	StateDraining HealthState = "draining"
)

// ReplicaStatus is a point-in-time view of one replica for status endpoints.
type ReplicaStatus struct {
	ID     string  `json:"id"`
	URL    string  `json:"url"` // password redacted
	Model  string  `json:"model"`
	Weight float64 `json:"weight"`
	// Role is the replica's part in a disaggregated pool: prefill, decode or both.
	Role  string      `json:"role"`
	State HealthState `json:"state"`
	// InFlight is this gateway's count of unfinished requests.
	InFlight int `json:"in_flight"`
	// RemoteInFlight is the other gateways' (fleet mode), as of their latest
	// snapshots; 0 in local mode. The policy sees InFlight + RemoteInFlight.
	RemoteInFlight int `json:"remote_in_flight"`
	// ConsecutiveFailures counts passive failures since the last success.
	ConsecutiveFailures int `json:"consecutive_failures"`
	// EjectedUntil is set while State is StateEjected.
	EjectedUntil time.Time `json:"ejected_until,omitzero"`
	// Load signals from the last successful scrape (see Candidate).
	Waiting       int       `json:"waiting"`
	Running       int       `json:"running"`
	KVUtilization float64   `json:"kv_utilization"`
	Fresh         bool      `json:"fresh"`
	ScrapedAt     time.Time `json:"scraped_at,omitzero"`
	// Engine is the engine whose metric names the latest scrape was read
	// with (vllm, sglang, llamacpp or tgi); empty before any.
	Engine string `json:"engine,omitempty"`
	// KVKnown is false when the engine exports no KV-cache usage: then
	// KVUtilization is 0 and means unknown.
	KVKnown bool `json:"kv_known"`
	// Token rates and latency means derived from the last two scrapes, as
	// the signal policies read them (see policy.Candidate); absent while
	// unknown.
	PromptTokensPerSec     *float64 `json:"prompt_tokens_per_sec,omitempty"`
	GenerationTokensPerSec *float64 `json:"generation_tokens_per_sec,omitempty"`
	MeanTTFTSeconds        *float64 `json:"mean_ttft_seconds,omitempty"`
	MeanTPOTSeconds        *float64 `json:"mean_tpot_seconds,omitempty"`
}

// replicaLoad is one scrape's result. Stored behind an atomic pointer and
// never mutated after publication.
type replicaLoad struct {
	engine    string // the engine whose names were read (see engines)
	waiting   int
	running   int
	kv        float64
	kvOK      bool // the engine exports a KV-cache usage; false: kv is unknown
	blockSize int  // the engine's KV block size in tokens, from its cache-config gauge; 0: not stated
	// eventsBlockSize is the block size the replica's KV events carried at
	// this scrape (0: none yet, or no events), to log a mismatch once.
	eventsBlockSize int
	scrapedAt       time.Time

	// As scraped, for the next scrape's derive.
	promptTokens, generationTokens cumulative
	ttftHist, tpotHist             cumulative
	// Derived from the previous scrape (see derive).
	promptRate, generationRate float64
	rates                      bool
	ttft, tpot                 mean
}

// replica is one upstream server and all router-side state about it.
//
// inFlight and load are atomics read on every request; the health fields
// change rarely and sit under mu, which is never held across I/O.
type replica struct {
	id      string
	model   string
	base    *url.URL
	prefix  string            // base as a string, without a trailing slash: what endpoint joins
	headers map[string]string // canonical names
	weight  float64
	role    string // RolePrefill, RoleDecode or RoleBoth
	engine  string // whose metric names to read: a key of engines, or "" for auto
	metrics *replicaMetrics

	inFlight atomic.Int64
	load     atomic.Pointer[replicaLoad]

	// published mirrors the last value written to the healthy gauge, so the
	// gauge is only touched when availability changes.
	published atomic.Int32 // -1 unknown, 0, 1

	mu           sync.Mutex
	draining     bool
	checkFailing bool // active checks say unhealthy
	checkPasses  int  // consecutive passing probes
	checkFails   int  // consecutive failing probes
	passiveFails int  // consecutive failed requests
	ejectedUntil time.Time
	scrapeFailed bool // last scrape failed; logs only the transition
}

func newReplica(id string, rc ReplicaConfig, poolModel, poolEngine string) *replica {
	u, _ := parseReplicaURL(rc.URL) // validated by PoolConfig.Validate
	r := &replica{
		id:      id,
		model:   rc.Model,
		base:    u,
		prefix:  strings.TrimSuffix(u.String(), "/"),
		headers: make(map[string]string, len(rc.Headers)),
		weight:  rc.Weight,
		role:    rc.role(),
		engine:  rc.Engine,
	}
	if r.model == "" {
		r.model = poolModel
	}
	if r.engine == "" {
		r.engine = poolEngine
	}
	if r.engine == EngineAuto {
		r.engine = ""
	}
	if r.weight == 0 {
		r.weight = 1
	}
	for k, v := range rc.Headers {
		r.headers[http.CanonicalHeaderKey(k)] = v
	}
	// RoundTrip, unlike http.Client, ignores credentials in the URL: turn
	// them into Basic auth here, unless Headers already authorise.
	if u.User != nil {
		if _, set := r.headers["Authorization"]; !set {
			pass, _ := u.User.Password()
			creds := base64.StdEncoding.EncodeToString([]byte(u.User.Username() + ":" + pass))
			r.headers["Authorization"] = "Basic " + creds
		}
	}
	r.published.Store(-1)
	return r
}

// engineSetting is the replica's engine setting as configured (auto when
// none names an engine).
func (r *replica) engineSetting() string {
	if r.engine == "" {
		return EngineAuto
	}
	return r.engine
}

// endpoint joins the replica's base URL and an absolute request path, which
// may carry a query ("/v1/models?x=1").
func (r *replica) endpoint(path string) string {
	return r.prefix + path
}

// available reports whether the replica may take a new request at now.
func (r *replica) available(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.availableLocked(now)
}

func (r *replica) availableLocked(now time.Time) bool {
	return !r.draining && !r.checkFailing && !now.Before(r.ejectedUntil)
}

func (r *replica) stateLocked(now time.Time) HealthState {
	switch {
	case r.draining:
		return StateDraining
	case r.checkFailing:
		return StateUnhealthy
	case now.Before(r.ejectedUntil):
		return StateEjected
	default:
		return StateHealthy
	}
}

// recordPassive folds one request outcome into the ejection state and
// reports whether this failure ejected the replica. threshold 0 disables
// ejection.
//
// The count is not cleared on ejection: once the cooldown ends the replica
// is on probation, where a single failure ejects it again and a single
// success clears the count. Failures of requests that were already in flight
// while the replica sat ejected do not extend the cooldown.
func (r *replica) recordPassive(ok bool, now time.Time, threshold int, cooldown time.Duration) (ejected bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ok {
		r.passiveFails = 0
		return false
	}
	r.passiveFails++
	if threshold <= 0 || r.passiveFails < threshold || now.Before(r.ejectedUntil) {
		return false
	}
	r.ejectedUntil = now.Add(cooldown)
	return true
}

// recordCheck folds one active probe into the health state and reports
// whether the replica's check state flipped.
func (r *replica) recordCheck(pass bool, unhealthyAfter, healthyAfter int) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pass {
		r.checkFails = 0
		r.checkPasses++
		if r.checkFailing && r.checkPasses >= healthyAfter {
			r.checkFailing = false
			return true
		}
		return false
	}
	r.checkPasses = 0
	r.checkFails++
	if !r.checkFailing && r.checkFails >= unhealthyAfter {
		r.checkFailing = true
		return true
	}
	return false
}

// setDraining reports whether the drain state changed.
func (r *replica) setDraining(on bool) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := r.draining != on
	r.draining = on
	return changed
}

// noteScrape records whether the latest scrape failed and reports whether
// that differs from the previous one (for transition-only logging).
func (r *replica) noteScrape(failed bool) (changed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	changed = r.scrapeFailed != failed
	r.scrapeFailed = failed
	return changed
}

// tryAcquire counts one more request in flight unless that would pass max
// (0 = unlimited). The compare-and-swap keeps the cap exact under
// concurrent picks.
func (r *replica) tryAcquire(max int) bool {
	if max <= 0 {
		r.inFlight.Add(1)
		return true
	}
	for {
		cur := r.inFlight.Load()
		if cur >= int64(max) {
			return false
		}
		if r.inFlight.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// candidate snapshots the replica for a picker. Load signals older than
// staleAfter (or never scraped) are reported as they are, with Fresh false.
func (r *replica) candidate(now time.Time, staleAfter time.Duration) policy.Candidate {
	c := policy.Candidate{ID: r.id, InFlight: int(r.inFlight.Load()), Weight: r.weight}
	if l := r.load.Load(); l != nil {
		c.Waiting, c.Running, c.KVUtilization, c.KVUnknown = l.waiting, l.running, l.kv, !l.kvOK
		c.PromptTokensPerSec, c.GenerationTokensPerSec, c.Rates = l.promptRate, l.generationRate, l.rates
		c.MeanTTFT, c.HasTTFT = l.ttft.v, l.ttft.ok
		c.MeanTPOT, c.HasTPOT = l.tpot.v, l.tpot.ok
		c.Fresh = staleAfter > 0 && now.Sub(l.scrapedAt) <= staleAfter
	}
	return c
}

func (r *replica) status(now time.Time, staleAfter time.Duration) ReplicaStatus {
	c := r.candidate(now, staleAfter)
	s := ReplicaStatus{
		ID:            r.id,
		URL:           r.base.Redacted(),
		Model:         r.model,
		Weight:        r.weight,
		Role:          r.role,
		InFlight:      c.InFlight,
		Waiting:       c.Waiting,
		Running:       c.Running,
		KVUtilization: c.KVUtilization,
		Fresh:         c.Fresh,
	}
	if l := r.load.Load(); l != nil {
		s.ScrapedAt, s.Engine, s.KVKnown = l.scrapedAt, l.engine, l.kvOK
	}
	if c.Rates {
		s.PromptTokensPerSec, s.GenerationTokensPerSec = &c.PromptTokensPerSec, &c.GenerationTokensPerSec
	}
	if c.HasTTFT {
		s.MeanTTFTSeconds = &c.MeanTTFT
	}
	if c.HasTPOT {
		s.MeanTPOTSeconds = &c.MeanTPOT
	}
	r.mu.Lock()
	s.State = r.stateLocked(now)
	s.ConsecutiveFailures = r.passiveFails
	if s.State == StateEjected {
		s.EjectedUntil = r.ejectedUntil
	}
	r.mu.Unlock()
	return s
}
