package server

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// admin guards an admin handler with the configured bearer token. The scheme is matched
// case-insensitively (RFC 9110 11.1: "bearer" is "Bearer"); the token is compared over
// SHA-256 digests in constant time, so neither its bytes nor its length leak through timing.
func (s *Server) admin(h handlerFunc) handlerFunc {
	want := sha256.Sum256([]byte(s.cfg.Admin.Token))
	return func(c *fiber.Ctx, rq *request) error {
		tok, ok := bearerToken(c.Get(fiber.HeaderAuthorization))
		got := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
			c.Set(fiber.HeaderWWWAuthenticate, `Bearer realm="triage-admin"`)
			return &apiError{status: http.StatusUnauthorized, typ: typeAuthentication, code: "invalid_admin_token",
				message: "admin endpoints need Authorization: Bearer <admin.token>"}
		}
		return h(c, rq)
	}
}

// bearerToken returns the credentials of an "Authorization: Bearer <token>" value, the scheme
// in any case and separated by one or more spaces.
func bearerToken(v string) (string, bool) {
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimLeft(rest, " "), true
}

func (s *Server) handleReload(c *fiber.Ctx, _ *request) error {
	ctx, cancel := context.WithTimeout(s.base, s.cfg.HTTP.RequestTimeout)
	defer cancel()
	res, err := s.router.Reload(ctx)
	if err != nil {
		return err
	}
	return sendJSON(c, http.StatusOK, res)
}

type drainRequest struct {
	Pool    string `json:"pool"`
	Replica string `json:"replica"`
}

type drainResponse struct {
	Pool    string                 `json:"pool"`
	Replica upstream.ReplicaStatus `json:"replica"`
}

func (s *Server) handleDrain(c *fiber.Ctx, _ *request) error   { return s.setDrain(c, true) }
func (s *Server) handleUndrain(c *fiber.Ctx, _ *request) error { return s.setDrain(c, false) }

// setDrain drains or undrains one replica: {"pool": "fast"|"slow" (or the pool's name),
// "replica": id}.
func (s *Server) setDrain(c *fiber.Ctx, on bool) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	if err := checkBody(c.Body()); err != nil {
		return err
	}
	var poolRaw, replicaRaw json.RawMessage
	if err := objectFields(c.Body(), "", true, true, map[string]*json.RawMessage{"pool": &poolRaw, "replica": &replicaRaw}); err != nil {
		return err
	}
	var req drainRequest
	var err error
	if req.Pool, err = optionalString(poolRaw, "pool"); err != nil {
		return err
	}
	if req.Replica, err = optionalString(replicaRaw, "replica"); err != nil {
		return err
	}
	p := s.poolNamed(req.Pool)
	if p == nil {
		return badRequest("unknown_pool", "pool", "pool: must be %q or %q, got %s", router.PathFast, router.PathSlow, clip(req.Pool))
	}
	if req.Replica == "" {
		return badRequest("missing_field", "replica", "replica: required")
	}
	if on {
		err = p.Drain(req.Replica)
	} else {
		err = p.Undrain(req.Replica)
	}
	if err != nil {
		return err
	}
	for _, r := range p.Replicas() {
		if r.ID == req.Replica {
			return sendJSON(c, http.StatusOK, drainResponse{Pool: p.Name(), Replica: r})
		}
	}
	return fmt.Errorf("replica %q vanished from pool %s", req.Replica, p.Name())
}

// poolNamed finds a pool by path ("fast", "slow") or configured name.
func (s *Server) poolNamed(name string) *upstream.Pool {
	switch name {
	case router.PathFast, s.fast.Name():
		return s.fast
	case router.PathSlow, s.slow.Name():
		return s.slow
	}
	return nil
}

// defaultTraceLimit is how many decisions GET /admin/trace returns without a limit (fewer
// when the pool keeps fewer).
const defaultTraceLimit = 100

type traceResponse struct {
	Path     string               `json:"path"`
	Pool     string               `json:"pool"`
	Policy   string               `json:"policy"`
	Capacity int                  `json:"capacity"`
	Records  []policy.TraceRecord `json:"records"`
	// Prefill and Decode are a disaggregated pool's leg decisions (absent otherwise); Records
	// are then its whole requests'.
	Prefill *legTrace `json:"prefill,omitempty"`
	Decode  *legTrace `json:"decode,omitempty"`
}

// handleTrace returns a pool's latest replica-policy decisions, oldest first:
// ?pool=fast|slow (or the pool's name) and an optional ?limit=N in [1, the pool's
// policy.trace.capacity] (default 100 or the capacity if smaller).
func (s *Server) handleTrace(c *fiber.Ctx, _ *request) error {
	name := c.Query("pool")
	if name == "" {
		return badRequest("missing_field", "pool", "pool: required, %q or %q", router.PathFast, router.PathSlow)
	}
	p := s.poolNamed(name)
	if p == nil {
		return &apiError{status: http.StatusNotFound, typ: typeInvalidRequest, code: "unknown_pool", param: "pool",
			message: fmt.Sprintf("pool: must be %q or %q, got %q", router.PathFast, router.PathSlow, name)}
	}
	path, policyName := router.PathFast, s.fast.PolicyName()
	if p == s.slow {
		path, policyName = router.PathSlow, s.slow.PolicyName()
	}
	tr := p.Tracer()
	if tr == nil {
		return &apiError{status: http.StatusConflict, typ: typeInvalidRequest, code: "trace_disabled", param: "pool",
			message: fmt.Sprintf("decision tracing is off for pool %s: set pools.%s.policy.trace.enabled: true (TRIAGE_POOLS_%s_POLICY_TRACE_ENABLED=true) and restart",
				p.Name(), path, strings.ToUpper(path))}
	}
	limit := min(defaultTraceLimit, tr.Capacity())
	if raw := c.Query("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > tr.Capacity() {
			return badRequest("invalid_limit", "limit", "limit: must be an integer in [1, %d] (pools.%s.policy.trace.capacity), got %q",
				tr.Capacity(), path, raw)
		}
		limit = n
	}
	records := tr.Recent(limit)
	if records == nil {
		records = []policy.TraceRecord{} // [] rather than null before the first decision
	}
	resp := traceResponse{Path: path, Pool: p.Name(), Policy: policyName, Capacity: tr.Capacity(), Records: records}
	resp.Prefill, resp.Decode = legTraces(p, p.Disaggregation(), limit)
	return sendJSON(c, http.StatusOK, resp)
}

type statusPool struct {
	Path     string                   `json:"path"`
	Name     string                   `json:"name"`
	Healthy  bool                     `json:"healthy"`
	InFlight int                      `json:"in_flight"`
	Replicas []upstream.ReplicaStatus `json:"replicas"`
}

type statusSlow struct {
	Active    int     `json:"active"`
	Max       int     `json:"max"`
	Load      float64 `json:"load"`
	Threshold float64 `json:"threshold"`
	// The slow-share cap: the window's share of routed requests (or of their tokens, per
	// ShareUnit) that went slow, over how many requests, the cap (0: none), the unit
	// (decision.share_unit: requests or tokens) and the threshold floor it sets.
	Share         float64 `json:"share"`
	ShareRequests int     `json:"share_requests"`
	ShareMax      float64 `json:"share_max"`
	ShareUnit     string  `json:"share_unit"`
	ShareFloor    float64 `json:"budget_threshold"`
}

type statusResponse struct {
	ModelVersion   string       `json:"model_version"`
	DecisionPolicy string       `json:"decision_policy"`
	Ready          readiness    `json:"readiness"`
	SlowPath       statusSlow   `json:"slow_path"`
	BatcherQueue   int          `json:"batcher_queue"`
	InFlight       int          `json:"in_flight_requests"`
	Pools          []statusPool `json:"pools"`
}

// handleStatus reports pools and replicas, the model version and the slow-path load.
func (s *Server) handleStatus(c *fiber.Ctx, _ *request) error {
	st := s.router.State()
	share, shareN := s.router.SlowShare()
	shareMax, shareUnit := s.router.ShareCap()
	resp := statusResponse{
		ModelVersion:   s.router.Version(),
		DecisionPolicy: s.router.Policy(),
		Ready:          s.readiness(),
		SlowPath: statusSlow{
			Active:        st.SlowActive,
			Max:           st.SlowMax,
			Load:          round6(st.Load()),
			Threshold:     round6(s.router.Threshold()),
			Share:         round6(share),
			ShareRequests: shareN,
			ShareMax:      shareMax,
			ShareUnit:     shareUnit,
			ShareFloor:    round6(st.ShareFloor),
		},
		BatcherQueue: st.QueueLen,
		InFlight:     s.active.count(),
	}
	for _, p := range []struct {
		path string
		pool *upstream.Pool
	}{{router.PathFast, s.fast}, {router.PathSlow, s.slow}} {
		resp.Pools = append(resp.Pools, statusPool{
			Path:     p.path,
			Name:     p.pool.Name(),
			Healthy:  p.pool.Healthy(),
			InFlight: p.pool.InFlight(),
			Replicas: p.pool.Replicas(),
		})
	}
	return sendJSON(c, http.StatusOK, resp)
}
