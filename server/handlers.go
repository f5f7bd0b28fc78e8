package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	"github.com/triage-gw/triage/router"
	"github.com/triage-gw/triage/upstream"
	"github.com/triage-gw/triage/upstream/policy"
)

// handleQueryProcess serves the contract of the original Triage design's Python prototype
// (docs/sources.md): classify, decide, execute a small chat completion on the chosen pool,
// answer {"label":"0"} (fast) or {"label":"1"} (slow).
func (s *Server) handleQueryProcess(c *fiber.Ctx, rq *request) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	in, err := decodeQueryProcess(c.Body(), s.lim)
	if err != nil {
		return err
	}
	s.m.notePasted(in)
	session := routingKey(strings.Clone(c.Get(HeaderSession)))
	target, err := sloTarget(c)
	if err != nil {
		return err
	}
	dl := s.newDeadline()
	defer dl.end()
	r, err := s.route(dl.ctx, rq, in.input)
	if err != nil {
		return dl.err(err)
	}
	defer r.Release() // the execution below has ended by then: the slot is held exactly that long
	setRouteHeaders(c, rq, &r)
	dl.watchClient(c.Context().Conn())
	defer dl.unwatchClient()
	replica, err := s.execute(dl.ctx, &r, in, policy.Request{Session: session, TTFTTarget: target})
	if replica != "" {
		c.Set(HeaderReplica, replica)
	}
	if err != nil {
		return dl.err(err)
	}
	c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
	return c.SendString(`{"label":"` + strconv.Itoa(r.Label()) + `"}`)
}

// executeRequest is the small chat completion query-process runs on the chosen pool. The
// model field is filled per replica by the pool (SetModel).
type executeRequest struct {
	Messages  []executeMessage `json:"messages"`
	MaxTokens int              `json:"max_tokens"`
}

type executeMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// execute runs the text on the route's pool and reads the answer to its end, reporting its
// tokens to the route (Used). It returns the replica that answered (when one did). A non-2xx
// answer is an error: the endpoint's body is fixed, so the status cannot pass through.
// routing carries the request's session and TTFT target; execute fills in the prompt.
func (s *Server) execute(ctx context.Context, r *router.Route, in textInput, routing policy.Request) (string, error) {
	pool := r.Pool
	content := in.instruction
	if strings.TrimSpace(in.context) != "" {
		content += "\n\n" + in.context
	}
	body, err := json.Marshal(executeRequest{
		Messages:  []executeMessage{{Role: "user", Content: content}},
		MaxTokens: s.cfg.HTTP.QueryProcessMaxTokens,
	})
	if err != nil {
		return "", fmt.Errorf("encode execution request: %w", err)
	}
	prompt := "user: " + content + "\n"
	routing.Prompt, routing.InputTokens = prompt, len(prompt)/4
	resp, err := pool.Do(ctx, &upstream.ForwardRequest{
		Method:   http.MethodPost,
		Path:     "/v1/chat/completions",
		Body:     body,
		SetModel: true,
		Routing:  routing,
	})
	if err != nil {
		return failedReplica(err), err
	}
	defer resp.Body.Close()
	if resp.Status < 200 || resp.Status > 299 {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.ReplicaID, &upstreamStatusError{pool: pool.Name(), replica: resp.ReplicaID,
			status: resp.Status, retryAfter: resp.Header.Get("Retry-After")}
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil { // broken mid-body: an *UpstreamError
		return resp.ReplicaID, err
	}
	if u, ok := resp.Usage(); ok {
		r.Used(u)
	}
	return resp.ReplicaID, nil
}

// classifyResult is one text's answer from /v1/classify.
type classifyResult struct {
	PSlow      float64 `json:"p_slow"`
	ModelLabel int     `json:"model_label"`
	Label      int     `json:"label"`
	Path       string  `json:"path"`
	Reason     string  `json:"reason"`
	Threshold  float64 `json:"threshold"`
	// ThresholdParts explains Threshold, the larger of its parts.
	ThresholdParts thresholdParts `json:"threshold_parts"`
	Load           float64        `json:"load"`
	Cache          string         `json:"cache"`
	CacheTier      string         `json:"cache_tier,omitempty"`
	Stage          string         `json:"stage"`
	Tokens         int            `json:"tokens"`
	ModelVersion   string         `json:"model_version"`
}

// thresholdParts are the two rules a routed request's P(slow) must pass: the policy's own
// threshold (quadratic: base + alpha·load²) and the slow-share cap's floor (0: none).
type thresholdParts struct {
	Load       float64 `json:"load"`
	ShareFloor float64 `json:"budget"` // the slow-share cap's floor; "budget" on the wire since the first release
}

type classifyResponse struct {
	Results []classifyResult `json:"results"`
}

// handleClassify scores and decides every text without executing anything. The decisions
// are what a routed request would get now, except that the slow-path semaphore is only
// looked at, never taken.
func (s *Server) handleClassify(c *fiber.Ctx, rq *request) error {
	if err := requireJSON(c); err != nil {
		return err
	}
	ins, err := decodeClassify(c.Body(), s.lim)
	if err != nil {
		return err
	}
	s.m.notePasted(ins...)
	dl := s.newDeadline()
	defer dl.end()
	texts := make([]string, len(ins))
	for i, in := range ins {
		texts[i] = in.input
	}
	// Together: one shared-tier round trip for all texts, and the misses share batches.
	routes, errs := s.router.PreviewMany(dl.ctx, texts)
	for _, err := range errs {
		if err != nil {
			return dl.err(err)
		}
	}
	out := make([]classifyResult, len(ins))
	for i := range routes {
		out[i] = resultFor(&routes[i])
	}
	// x-router-latency: arrival to the last text's decision. Server-Timing breaks a single
	// text's time down like a routed request's; for several texts the parts overlap.
	last := routes[0].Decided
	for _, r := range routes[1:] {
		if r.Decided.After(last) {
			last = r.Decided
		}
	}
	c.Set(HeaderLatency, millis(last.Sub(rq.arrival)))
	if len(routes) == 1 {
		setServerTiming(c, &routes[0])
	}
	return sendJSON(c, http.StatusOK, classifyResponse{Results: out})
}

func resultFor(r *router.Route) classifyResult {
	return classifyResult{
		PSlow:      round6(float64(r.PSlow)),
		ModelLabel: r.ModelLabel(),
		Label:      r.Label(),
		Path:       r.Path(),
		Reason:     string(r.Reason),
		Threshold:  round6(r.Decision.Threshold),
		ThresholdParts: thresholdParts{
			Load:       round6(r.Decision.LoadThreshold),
			ShareFloor: round6(r.Decision.ShareFloor),
		},
		Load:         round6(r.Decision.Load),
		Cache:        r.CacheResult(),
		CacheTier:    r.CacheTier(),
		Stage:        r.Stage.String(),
		Tokens:       r.Tokens,
		ModelVersion: r.Version,
	}
}

// round6 keeps float32 noise (0.8700000047683716) out of JSON.
func round6(x float64) float64 { return math.Round(x*1e6) / 1e6 }

type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

// handleModels lists the routed virtual model ("auto" and its configured aliases) first, then
// the distinct model names configured for the pools' replicas (no upstream call). A name one
// pool serves pins requests to that pool; owned_by says which ("triage/<pool>"), or
// "triage" for the routed ones (a name both pools serve is routed too).
func (s *Server) handleModels(c *fiber.Ctx, _ *request) error {
	list := modelList{Object: "list", Data: []modelCard{}}
	created := s.startedAt.Unix()
	for _, a := range s.router.Aliases() {
		list.Data = append(list.Data, modelCard{ID: a, Object: "model", Created: created, OwnedBy: "triage"})
	}
	for _, m := range s.router.Served() {
		owner := "triage"
		if m.Pool != "" {
			owner += "/" + m.Pool
		}
		list.Data = append(list.Data, modelCard{ID: m.Name, Object: "model", Created: created, OwnedBy: owner})
	}
	return sendJSON(c, http.StatusOK, list)
}

// handleHealthz is liveness: the process serves HTTP. It answers GET /healthz and GET /health.
func (s *Server) handleHealthz(c *fiber.Ctx, _ *request) error {
	return sendJSON(c, http.StatusOK, map[string]string{"status": "ok"})
}

type readiness struct {
	Ready    bool `json:"ready"`
	Model    bool `json:"model_loaded"`
	FastPool bool `json:"fast_pool_healthy"`
	SlowPool bool `json:"slow_pool_healthy"`
	Draining bool `json:"draining"`
	// Simulated is set when the pools are the built-in simulators (sim.enabled): ready, but
	// every answer is made up. Absent otherwise.
	Simulated bool   `json:"simulated,omitempty"`
	Warning   string `json:"warning,omitempty"`
}

func (s *Server) readiness() readiness {
	r := readiness{
		Model:    s.router.Version() != "",
		FastPool: s.fast.Healthy(),
		SlowPool: s.slow.Healthy(),
		Draining: s.draining.Load(),
	}
	r.Ready = r.Model && r.FastPool && r.SlowPool && !r.Draining
	if s.cfg.Simulated {
		r.Simulated = true
		r.Warning = "the pools are the built-in simulators (sim.enabled or --simulate): every answer is made up"
	}
	return r
}

// handleReadyz is readiness: a model is loaded, each pool has a healthy replica and the
// server is not draining. 503 otherwise, with the failing checks in the body.
func (s *Server) handleReadyz(c *fiber.Ctx, _ *request) error {
	r := s.readiness()
	status := http.StatusOK
	if !r.Ready {
		status = http.StatusServiceUnavailable
	}
	return sendJSON(c, status, r)
}
