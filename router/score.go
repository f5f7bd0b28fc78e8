package router

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/triage-gw/triage/batcher"
	"github.com/triage-gw/triage/classifier"
)

// Score is the model's output for one text, the model that produced it, and where the time
// went.
type Score struct {
	// PSlow is P(slow | text) in [0, 1].
	PSlow float32
	// Tokens is the number of word pieces the encoder saw (after truncation, special tokens
	// included).
	Tokens int
	// Version is the model version that produced PSlow (part of the cache key).
	Version string
	// Cutoff is that model's label threshold: the model says slow iff PSlow > Cutoff.
	Cutoff float64
	// Stage is the classifier stage that produced PSlow: the first stage (static) or the
	// encoder. A cache hit reports the stage of the result it found.
	Stage classifier.Stage
	// Hit reports a result-cache hit (the classifier did not run); Shared that the hit came
	// from the fleet's shared tier rather than this gateway's own.
	Hit, Shared bool
	// CacheTime, Static, Queue and Inference are the time spent in the cache lookup, in the
	// first stage (tokenizing and scoring), waiting for a batch, and in the batch's encoder
	// call. All but CacheTime are zero on a hit; Queue and Inference are zero when the first
	// stage decided.
	CacheTime, Static, Queue, Inference time.Duration
	// InBand reports that the cascade's first stage scored the text, InBandPSlow, but inside
	// its band, so the encoder was asked. When the encoder then fails the request (budget
	// spent, queue full, a failed batch), Route decides on InBandPSlow rather than place the
	// request blind: a less sure answer is still far better than the fail-open fallback.
	InBand      bool
	InBandPSlow float32
}

// ModelSlow reports whether the model's own label is slow.
func (s Score) ModelSlow() bool { return float64(s.PSlow) > s.Cutoff }

// The values of CacheResult, as in the x-router-cache header and the cache metric.
const (
	CacheHit  = "hit"
	CacheMiss = "miss"
)

// CacheResult is CacheHit or CacheMiss.
func (s Score) CacheResult() string {
	if s.Hit {
		return CacheHit
	}
	return CacheMiss
}

// CacheTier names where a hit was found: "local" (this gateway) or "shared" (the fleet's
// tier); "" for a miss.
func (s Score) CacheTier() string {
	switch {
	case s.Shared:
		return "shared"
	case s.Hit:
		return "local"
	}
	return ""
}

// scored is the batcher's result: a model output and the model that made it, so the cache
// entry is keyed by the model that really answered even across a reload. err is set instead
// for a text the classifier refused, so one unreadable text fails only its own request and
// not everyone sharing its batch.
type scored struct {
	res     classifier.Result
	version string
	key     string // the cache version of the model that made it
	cutoff  float64
	err     error
}

// classifyBatch runs the encoder on texts: with the tokens their first stage made when every
// text has them (so none is tokenized twice), else from the texts.
func (r *Router) classifyBatch(ctx context.Context, ref *loaded, texts []string) ([]classifier.Result, error) {
	if ref.staged == nil {
		return ref.m.Classify(ctx, texts)
	}
	toks := make([]classifier.Tokens, len(texts))
	for i, t := range texts {
		v, ok := r.tokens.Load(t)
		if !ok {
			return ref.m.Classify(ctx, texts)
		}
		toks[i] = v.(classifier.Tokens)
	}
	res, err := ref.staged.ClassifyTokens(ctx, toks)
	if errors.Is(err, classifier.ErrForeignTokens) {
		// Tokenized by a model a reload has since replaced, with another tokenizer.
		return ref.m.Classify(ctx, texts)
	}
	return res, err
}

// runBatch is the batcher's Func: one Classify call on the current model, holding a
// reference so a reload cannot close the model under it. A text the classifier rejects
// (*classifier.TextError; it checks every text before any inference) gets its own error and
// the rest are classified again without it.
func (r *Router) runBatch(ctx context.Context, texts []string) ([]scored, error) {
	ref := r.models.acquire()
	if ref == nil {
		return nil, ErrNoModel
	}
	defer ref.release()
	out := make([]scored, len(texts))
	todo := make([]int, len(texts)) // indexes into texts still to classify
	for i := range todo {
		todo[i] = i
	}
	for len(todo) > 0 {
		batch := make([]string, len(todo))
		for j, i := range todo {
			batch[j] = texts[i]
		}
		res, err := r.classifyBatch(ctx, ref, batch)
		var te *classifier.TextError
		if errors.As(err, &te) && te.Index >= 0 && te.Index < len(todo) {
			out[todo[te.Index]].err = &UnclassifiableError{Err: te.Err}
			todo = slices.Delete(todo, te.Index, te.Index+1)
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("classifier %s: %w", ref.version, err)
		}
		if len(res) != len(batch) {
			return nil, fmt.Errorf("classifier %s: %d results for %d texts", ref.version, len(res), len(batch))
		}
		for j, i := range todo {
			if p := float64(res[j].PSlow); math.IsNaN(p) || p < 0 || p > 1 {
				return nil, fmt.Errorf("classifier %s: P(slow) = %v, outside [0, 1]", ref.version, p)
			}
			out[i] = scored{res: res[j], version: ref.version, key: ref.key, cutoff: ref.cutoff}
		}
		// Cached here rather than by the waiters: a text whose every waiter has stopped
		// waiting (its budget ran out) still fills the cache, so its next request is
		// decided by the model.
		for _, i := range todo {
			r.store(ref.key, texts[i], cached{pSlow: out[i].res.PSlow, tokens: out[i].res.Tokens, stage: classifier.StageEncoder})
			r.m.classifications.WithLabelValues(classifier.StageEncoder.String()).Inc()
		}
		break
	}
	return out, nil
}

// score looks text (built by Input; noise words dropped first for a Filtered model) up in
// the caches and classifies it on a miss, waiting
// for the encoder at most budget (0: as long as ctx allows).
func (r *Router) score(ctx context.Context, text string, budget time.Duration) (Score, error) {
	var out [1]Score
	var errs [1]error
	r.scoreMany(ctx, []string{text}, out[:], errs[:], budget)
	return out[0], errs[0]
}

// scoreMany scores texts into out (errs[i] for a text that failed): each text is looked up
// in this gateway's cache; the misses in the shared tier, all in one round trip; what is
// still missing goes through the first stage, and the texts it leaves undecided to the
// encoder, submitted together so they share batches. A text the encoder has not answered
// within budget (when > 0) fails with ErrBudgetExceeded, its Queue the time it waited.
func (r *Router) scoreMany(ctx context.Context, texts []string, out []Score, errs []error, budget time.Duration) {
	start := time.Now()
	cur := r.models.peek()
	if cur == nil {
		for i := range errs {
			errs[i] = ErrNoModel
		}
		return
	}
	if cur.filter != nil {
		filtered := make([]string, len(texts))
		for i, t := range texts {
			filtered[i] = classifier.FilterInput(t, cur.filter)
		}
		texts = filtered
	}
	hit := func(i int, c cached, shared bool) {
		r.m.cacheRequests.WithLabelValues("hit").Inc()
		out[i] = Score{PSlow: c.pSlow, Tokens: c.tokens, Version: cur.version, Cutoff: cur.cutoff, Stage: c.stage,
			Hit: true, Shared: shared, CacheTime: time.Since(start)}
	}
	var miss []int
	for i, text := range texts {
		if c, ok := r.cache.get(cur.key, text); ok {
			hit(i, c, false)
			continue
		}
		miss = append(miss, i)
	}
	if len(miss) > 0 && r.shared != nil {
		keys := make([]string, len(miss))
		for j, i := range miss {
			keys[j] = texts[i]
		}
		vals, found := r.shared.Get(ctx, cur.key, keys)
		still := miss[:0]
		for j, i := range miss {
			c, ok := cached{}, j < len(found) && found[j]
			if ok {
				c, ok = decodeCached(vals[j])
			}
			if !ok {
				still = append(still, i)
				continue
			}
			r.cache.set(cur.key, texts[i], c)
			hit(i, c, true)
		}
		miss = still
	}
	lookup := time.Since(start)
	r.m.cacheRequests.WithLabelValues("miss").Add(float64(len(miss)))
	if cur.staged != nil {
		miss = r.scoreFirstStage(cur, texts, miss, out, errs, lookup)
	}
	classify := func(i int) {
		s, t, err := r.submit(ctx, texts[i], budget)
		if err == nil {
			err = s.err
		}
		if err != nil {
			errs[i] = err
			out[i].CacheTime, out[i].Queue = lookup, t.Queue
			return
		}
		out[i] = Score{PSlow: s.res.PSlow, Tokens: s.res.Tokens, Version: s.version, Cutoff: s.cutoff,
			Stage: classifier.StageEncoder, CacheTime: lookup, Static: out[i].Static, Queue: t.Queue, Inference: t.Inference}
	}
	if len(miss) == 1 {
		classify(miss[0])
		return
	}
	// Submitted together, the texts share batches.
	var wg sync.WaitGroup
	for _, i := range miss {
		wg.Go(func() { classify(i) })
	}
	wg.Wait()
}

// scoreFirstStage runs the first stage on the texts at indexes miss and returns those it
// leaves to the encoder, their tokens handed over in r.tokens. The band narrows with the
// encoder's queue (CascadeConfig.NarrowFrom); a text decided only because of that is not
// cached, so the cache holds what the model's own band would answer and an idle gateway
// does not keep serving decisions made in a rush.
func (r *Router) scoreFirstStage(cur *loaded, texts []string, miss []int, out []Score, errs []error, lookup time.Duration) []int {
	left := miss[:0]
	band := r.cfg.Cascade.bandAt(cur.band, r.batch.QueueLen())
	for _, i := range miss {
		t0 := time.Now()
		res, tok, decided, own, err := firstStage(cur, band, texts[i])
		took := time.Since(t0)
		switch {
		case err != nil:
			errs[i] = err
		case decided:
			r.m.classifications.WithLabelValues(classifier.StageStatic.String()).Inc()
			if own {
				r.store(cur.key, texts[i], cached{pSlow: res.PSlow, tokens: res.Tokens, stage: classifier.StageStatic})
			}
			out[i] = Score{PSlow: res.PSlow, Tokens: res.Tokens, Version: cur.version, Cutoff: cur.cutoff,
				Stage: classifier.StageStatic, CacheTime: lookup, Static: took}
		default:
			if tok.Len() > 0 {
				r.tokens.Store(texts[i], tok)
			}
			out[i] = Score{Version: cur.version, Cutoff: cur.cutoff, Tokens: res.Tokens, Static: took,
				InBand: true, InBandPSlow: res.PSlow}
			left = append(left, i)
		}
	}
	return left
}

// store caches a fresh result in both tiers.
func (r *Router) store(key, text string, c cached) {
	r.cache.set(key, text, c)
	if r.shared != nil {
		r.shared.Set(key, text, c.encode())
	}
}

// submit hands text to the batcher and waits for its result. Without a budget the wait is
// the caller's: it ends with ctx, and a text left without waiters before its batch starts is
// dropped by the batcher. With one, a text that would not be done within the budget (the
// running batch's rest, the texts queued ahead and its own inference) is not queued at all
// (ErrQueueFull at once: waiting for what cannot come in time would only delay the fallback
// and spend the encoder on a text nobody waits for; at an idle batcher, a text slower than the
// budget is taken only as a once-a-second probe); one that is queued is
// detached from ctx and carried by the router's lifetime instead, so if the caller stops
// waiting (budget spent or ctx done) it is still classified, and runBatch caches it. The
// caller stops waiting with ErrBudgetExceeded (Timing.Queue the budget) once budget has
// passed. The first stage's tokens are handed over until the submission ends, whoever waits
// for it.
func (r *Router) submit(ctx context.Context, text string, budget time.Duration) (scored, batcher.Timing, error) {
	if budget <= 0 {
		defer r.tokens.Delete(text)
		return r.batch.SubmitTimed(ctx, text)
	}
	if err := ctx.Err(); err != nil {
		// A caller already gone starts nothing, as without a budget. Otherwise a fast answer
		// and ctx.Done would both be ready below, and the caller could get either.
		r.tokens.Delete(text)
		return scored{}, batcher.Timing{}, err
	}
	type reply struct {
		s   scored
		t   batcher.Timing
		err error
	}
	done := make(chan reply, 1)
	r.lifeMu.Lock()
	if r.life.Err() != nil {
		r.lifeMu.Unlock()
		r.tokens.Delete(text)
		return scored{}, batcher.Timing{}, ErrClosed
	}
	r.detached.Add(1)
	r.lifeMu.Unlock()
	go func() {
		defer r.detached.Done()
		defer r.tokens.Delete(text)
		s, t, err := r.batch.SubmitWithin(r.life, text, budget)
		done <- reply{s, t, err}
	}()
	timer := time.NewTimer(budget)
	defer timer.Stop()
	select {
	case rep := <-done:
		return rep.s, rep.t, rep.err
	case <-timer.C:
		return scored{}, batcher.Timing{Queue: budget}, ErrBudgetExceeded
	case <-ctx.Done():
		return scored{}, batcher.Timing{}, ctx.Err()
	}
}
