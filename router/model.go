package router

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

// Model is the classifier as the router uses it. The real one, *onnx.Classifier (package
// classifier/onnx), is wired in by cmd/triage, which also holds its interface guards, so
// that the router builds and tests without the model runtime.
//
// Classify must be safe for concurrent use and return one result per text, in order.
// Version names the model's artifacts; it is part of every cache key. LabelThreshold is the
// model's own boundary (P(slow) above it is the model saying slow); it is read once per load.
// Close frees the model; the router calls it once, after the last Classify on it has returned.
type Model interface {
	Classify(ctx context.Context, texts []string) ([]classifier.Result, error)
	Version() string
	LabelThreshold() float64
	Close() error
}

// Loader builds a model from its configured artifacts. The router calls it once in New and
// again on every Reload, so it must read the artifacts afresh.
type Loader func() (Model, error)

// loaded is one loaded model: its counted references and what every request reads of it. The
// holder owns one reference while the model is current; each batch takes one for the length
// of its Classify call. Whoever drops the count to zero closes the model, so a replaced model
// is closed only after the batches still using it have finished.
type loaded struct {
	m       Model
	version string
	cutoff  float64
	// staged is the model's first stage and band when the cascade uses it; nil otherwise.
	staged Staged
	band   classifier.Band
	// filter is the noise filter the model was trained behind (see Filtered), nil for
	// none: its texts lose their noise words before the caches and both stages see them.
	filter func(string) string
	// key is the version the caches are keyed by (see cacheVersion).
	key  string
	refs atomic.Int64
	log  *slog.Logger
}

func (l *loaded) release() {
	if l.refs.Add(-1) == 0 {
		if err := l.m.Close(); err != nil {
			l.log.Error("closing classifier model", "model_version", l.version, "err", err)
			return
		}
		l.log.Info("classifier model closed", "model_version", l.version)
	}
}

// holder holds the current model. Its mutex guards only the pointer swap and the refcount
// increment that must not race it; no model call happens under it.
type holder struct {
	log     *slog.Logger
	cascade CascadeConfig
	mu      sync.Mutex
	cur     *loaded // nil before the first swap and after close
	closed  bool
	// current mirrors cur for the lock-free reads every request makes (version and cutoff),
	// keeping the mutex off the cache-hit path. Written only under mu.
	current atomic.Pointer[loaded]
	// last is the most recent model ever made current, kept after close so that gauges and
	// status read during shutdown still report its label threshold.
	last atomic.Pointer[loaded]
}

// acquire returns the current model with a reference taken, or nil after close. The caller
// must release it.
func (h *holder) acquire() *loaded {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cur == nil {
		return nil
	}
	h.cur.refs.Add(1)
	return h.cur
}

// peek returns the current model without a reference (for its version and cutoff), or nil
// after close.
func (h *holder) peek() *loaded { return h.current.Load() }

// swap makes m current and drops the holder's reference to the previous model, which closes
// when its last batch ends. It returns ErrClosed (leaving m to the caller) once the holder is
// closed.
func (h *holder) swap(m Model) error {
	l := &loaded{m: m, version: m.Version(), cutoff: m.LabelThreshold(), log: h.log}
	l.staged, l.band = stageOf(m, h.cascade)
	if f, ok := m.(Filtered); ok {
		// An unknown name cannot get here: the manifest's validation refuses it.
		l.filter, _ = classifier.TextFilter(f.TextFilter())
	}
	l.key = cacheVersion(l.version, l.staged, l.band)
	l.refs.Store(1)
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return ErrClosed
	}
	old := h.cur
	h.cur = l
	h.current.Store(l)
	h.last.Store(l)
	h.mu.Unlock()
	if old != nil {
		old.release()
	}
	return nil
}

func (h *holder) isClosed() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closed
}

// close drops the current model, which closes once in-flight batches release it. Later
// swaps are refused. Idempotent.
func (h *holder) close() {
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

// probe refuses a model that cannot classify: an empty version, a label threshold outside
// (0, 1), an error, the wrong number of results or a probability outside [0, 1].
func probe(ctx context.Context, m Model) error {
	if m.Version() == "" {
		return errors.New("model reports an empty version")
	}
	if t := m.LabelThreshold(); !(t > 0 && t < 1) {
		return fmt.Errorf("model reports label threshold %v, outside (0, 1)", t)
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

// loadAndProbe loads a model and refuses one that fails the probe, closing it.
func loadAndProbe(ctx context.Context, load Loader) (Model, error) {
	m, err := load()
	if err != nil {
		return nil, fmt.Errorf("load classifier: %w", err)
	}
	if m == nil {
		return nil, errors.New("load classifier: loader returned no model")
	}
	if err := probe(ctx, m); err != nil {
		m.Close()
		return nil, fmt.Errorf("classifier model %q refused: %w", m.Version(), err)
	}
	return m, nil
}

// ReloadResult reports a model reload.
type ReloadResult struct {
	Previous string `json:"previous_version"`
	Current  string `json:"model_version"`
}

// ReloadError is a refused reload: the model did not load or failed its probe, and the
// previous one keeps serving. Reload has already logged it.
type ReloadError struct{ Err error }

func (e *ReloadError) Error() string {
	return "model reload refused, the current model keeps serving: " + e.Err.Error()
}

func (e *ReloadError) Unwrap() error { return e.Err }

// Reload loads the model again (the Loader reads the artifacts afresh), probes it and, if it
// works, makes it current: new batches use it, batches in flight finish on the old one,
// which is closed when the last of them ends; cache keys follow the new version. A model
// that fails to load or to classify the probe is refused with a *ReloadError, logged here,
// and the old model keeps serving. After Close it returns ErrClosed. Reloads are serialised;
// Reload is safe for concurrent use.
func (r *Router) Reload(ctx context.Context) (ReloadResult, error) {
	r.reloadMu.Lock()
	defer r.reloadMu.Unlock()
	if r.models.isClosed() {
		return ReloadResult{}, ErrClosed
	}
	prev := r.Version()
	res := ReloadResult{Previous: prev, Current: prev}
	m, err := loadAndProbe(ctx, r.load)
	if err == nil {
		if err = r.models.swap(m); err != nil {
			m.Close()
			return res, err
		}
	}
	if err != nil {
		r.m.reloads.WithLabelValues("error").Inc()
		r.log.Error("model reload refused; the current model keeps serving", "model_version", prev, "err", err)
		return res, &ReloadError{Err: err}
	}
	res.Current = m.Version()
	r.m.reloads.WithLabelValues("ok").Inc()
	r.m.setModel(res.Current)
	r.logStages(m)
	r.log.Info("model reloaded", "previous_version", prev, "model_version", res.Current)
	return res, nil
}
