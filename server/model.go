package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"

	"github.com/triage-gw/triage/classifier"
)

// Model is the classifier as the server uses it; *classifier.Classifier implements it.
//
// Classify must be safe for concurrent use and return one result per text, in order.
// Version names the model's artifacts; it is part of every cache key. Close frees the model;
// the server calls it once, after the last Classify on it has returned.
type Model interface {
	Classify(ctx context.Context, texts []string) ([]classifier.Result, error)
	Version() string
	Close() error
}

// Loader builds a model from its configured artifacts. The server calls it once in New and
// again on every reload (admin endpoint or SIGHUP), so it must read the artifacts afresh.
type Loader func() (Model, error)

// modelRef counts the users of one loaded model. The holder owns one reference while the
// model is current; each batch takes one for the length of its Classify call. Whoever drops
// the count to zero closes the model, so a replaced model is closed only after the batches
// still using it have finished.
type modelRef struct {
	m       Model
	version string
	refs    atomic.Int64
	log     *slog.Logger
}

func (r *modelRef) release() {
	if r.refs.Add(-1) == 0 {
		if err := r.m.Close(); err != nil {
			r.log.Error("closing classifier model", "model_version", r.version, "err", err)
			return
		}
		r.log.Info("classifier model closed", "model_version", r.version)
	}
}

// models holds the current model. Its mutex guards only the pointer swap and the refcount
// increment that must not race it; no model call happens under it.
type models struct {
	log    *slog.Logger
	mu     sync.Mutex
	cur    *modelRef // nil before the first swap and after close
	closed bool
	// current mirrors cur for version, which every request reads: a lock-free load keeps the
	// mutex off the cache-hit path. Written only under mu.
	current atomic.Pointer[modelRef]
}

// acquire returns the current model with a reference taken, or nil after close. The caller
// must release it.
func (h *models) acquire() *modelRef {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		return nil
	}
	h.cur.refs.Add(1)
	return h.cur
}

// version returns the current model's version, or "" after close.
func (h *models) version() string {
	if r := h.current.Load(); r != nil {
		return r.version
	}
	return ""
}

// swap makes m current and drops the holder's reference to the previous model, which closes
// when its last batch ends. It returns the previous version ("" if none), or errShuttingDown
// (leaving m to the caller) once the holder is closed.
func (h *models) swap(m Model) (string, error) {
	r := &modelRef{m: m, version: m.Version(), log: h.log}
	r.refs.Store(1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return "", errShuttingDown
	}
	old := h.cur
	h.cur = r
	h.current.Store(r)
	h.mu.Unlock()
	if old == nil {
		return "", nil
	}
	old.release()
	return old.version, nil
}

// close drops the current model, which closes once in-flight batches release it. Later
// swaps are refused.
func (h *models) close() {
	h.mu.Lock()
	old := h.cur
	h.cur = nil
	h.current.Store(nil)
	h.closed = true
	h.mu.Unlock()
	if old != nil {
		old.release()
	}
}

// probeText is classified by every newly loaded model before it may serve.
const probeText = "Summarize the following paragraph in one sentence."

// probe refuses a model that cannot classify: an error, the wrong number of results or a
// probability outside [0, 1].
func probe(ctx context.Context, m Model) error {
	if m.Version() == "" {
		return errors.New("model reports an empty version")
	}
	res, err := m.Classify(ctx, []string{probeText})
	if err != nil {
		return fmt.Errorf("probe classification: %w", err)
	}
	if len(res) != 1 {
		return fmt.Errorf("probe classification returned %d results for 1 text", len(res))
	}
	if p := float64(res[0].PSlow); math.IsNaN(p) || p < 0 || p > 1 {
		return fmt.Errorf("probe classification returned P(slow) = %v, outside [0, 1]", p)
	}
	return nil
}
