package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
)

// VTCConfig tunes the vtc-basic policy. Names and defaults follow the
// AIBRIX_ROUTER_VTC_* variables of AIBrix's routing algorithms, except
// Window.
type VTCConfig struct {
	// Window is how long a user's tokens count. Default "60s" (AIBrix uses
	// 5 minutes). Counting is bucketed in Window/12 steps, so tokens stop
	// counting between 11/12 and 12/12 of Window after they were charged.
	Window time.Duration `yaml:"window" json:"window"`
	// InputTokenWeight and OutputTokenWeight weigh a request's input tokens
	// (charged at Pick) and output tokens (charged at Done). Defaults 1, 2.
	InputTokenWeight  float64 `yaml:"input_token_weight" json:"input_token_weight"`
	OutputTokenWeight float64 `yaml:"output_token_weight" json:"output_token_weight"`
	// MinTokens and MaxTokens size the fairness bucket: a user's windowed
	// tokens are divided by max(MinTokens, (min+max)/2), min and max being
	// the smallest and largest positive per-user totals (MinTokens and
	// MaxTokens themselves while no user has any). Defaults 1000, 8000.
	MinTokens float64 `yaml:"min_tokens" json:"min_tokens"`
	MaxTokens float64 `yaml:"max_tokens" json:"max_tokens"`
	// MaxReplicaLoad normalises load: utilisation = min(InFlight /
	// MaxReplicaLoad, 1). Default 100.
	MaxReplicaLoad float64 `yaml:"max_replica_load" json:"max_replica_load"`
	// FairnessWeight and UtilizationWeight combine the two scores.
	// Defaults 1, 1.
	FairnessWeight    float64 `yaml:"fairness_weight" json:"fairness_weight"`
	UtilizationWeight float64 `yaml:"utilization_weight" json:"utilization_weight"`
	// MaxUsers bounds how many users' windows are kept, whatever the
	// window: the user is a value the client chooses, so a client sending
	// a new one on every request would otherwise grow the table for a
	// whole window. When a new user arrives at the bound, the lightest
	// eighth of the users are forgotten (a forgotten user only looks
	// lighter than it was); Env.Evicted counts them. 270 to 380 bytes a
	// user (keys of 16 to 128 bytes), so 5–8 MB at the default. Default
	// 20000.
	MaxUsers int `yaml:"max_users" json:"max_users"`
}

func init() {
	register("vtc-basic", "vtc", DefaultVTCConfig, func(c VTCConfig, env Env) (Picker, error) {
		p, err := NewVTCBasic(c, env.Now)
		if err == nil {
			p.evicted = evictFunc(env)
		}
		return picker(p, err)
	})
}

// DefaultVTCConfig returns AIBrix's defaults with a 60-second window.
func DefaultVTCConfig() VTCConfig {
	return VTCConfig{
		Window:            time.Minute,
		InputTokenWeight:  1,
		OutputTokenWeight: 2,
		MinTokens:         1000,
		MaxTokens:         8000,
		MaxReplicaLoad:    100,
		FairnessWeight:    1,
		UtilizationWeight: 1,
		MaxUsers:          20_000,
	}
}

// ValidateAt reports every invalid field, each named from path
// ("pools.fast.policy.vtc" in a pool's config).
func (c VTCConfig) ValidateAt(path string) error {
	var errs []error
	if c.Window < vtcBuckets*time.Millisecond {
		errs = append(errs, fmt.Errorf("%s.window: must be >= %v, got %v", path, vtcBuckets*time.Millisecond, c.Window))
	}
	nonNeg := []struct {
		name string
		v    float64
	}{
		{"input_token_weight", c.InputTokenWeight},
		{"output_token_weight", c.OutputTokenWeight},
		{"fairness_weight", c.FairnessWeight},
		{"utilization_weight", c.UtilizationWeight},
	}
	for _, f := range nonNeg {
		if !validNonNeg(f.v) {
			errs = append(errs, fmt.Errorf("%s.%s: must be a finite number >= 0, got %v", path, f.name, f.v))
		}
	}
	if !validPos(c.MinTokens) {
		errs = append(errs, fmt.Errorf("%s.min_tokens: must be a finite number > 0, got %v", path, c.MinTokens))
	}
	if !validPos(c.MaxTokens) || c.MaxTokens < c.MinTokens {
		errs = append(errs, fmt.Errorf("%s.max_tokens: must be a finite number >= min_tokens (%v), got %v", path, c.MinTokens, c.MaxTokens))
	}
	if !validPos(c.MaxReplicaLoad) {
		errs = append(errs, fmt.Errorf("%s.max_replica_load: must be a finite number > 0, got %v", path, c.MaxReplicaLoad))
	}
	if c.MaxUsers < 1 || c.MaxUsers > maxIndexBlocks {
		errs = append(errs, fmt.Errorf("%s.max_users: must be in [1, %d], got %d", path, maxIndexBlocks, c.MaxUsers))
	}
	return errors.Join(errs...)
}

// vtcBuckets is how many sub-windows a user's token count is kept in.
const vtcBuckets = 12

// VTCBasic is AIBrix's vtc-basic policy. AIBrix's description of its routing
// algorithms gives only its outline and knobs; the combination below follows
// AIBrix's vtc_basic.go:
//
//	tokens      = the user's weighted tokens in the sliding window
//	bucket      = max(MinTokens, (min_user_tokens + max_user_tokens) / 2)
//	position    = min(tokens / bucket, n−1)
//	fairness_i  = |i − position|                 (i = candidate index)
//	utilisation = min(InFlight_i / MaxReplicaLoad, 1)
//	score_i     = FairnessWeight·fairness_i + UtilizationWeight·utilisation_i
//
// and the lowest score wins. So users are spread over the candidate list
// by how much service they recently got: light users land on the first
// candidates, heavy users on the last, and a heavy user cannot crowd a
// light one's replica. Utilisation breaks the near-ties in between.
//
// Departures from AIBrix, on purpose:
//   - AIBrix adds a random 0–0.1 to every score; here exact ties go
//     round-robin instead, so decisions are reproducible.
//   - AIBrix reads running requests from scraped metrics; here InFlight,
//     which is exact and fresh.
//   - AIBrix charges input plus estimated output at routing time; here
//     input is charged at Pick and real output at Done.
//   - A request without User gets no fairness term (AIBrix picks at
//     random): the least-utilised candidate wins.
//
// The candidate index is the position in cands, so the pool must list
// candidates in a stable order (it does: configuration order).
//
// Traces score candidates by the combined score (lower is better).
//
// The table of users is bounded by MaxUsers as well as by the window (see
// VTCConfig.MaxUsers).
//
// Concurrency: one mutex guards the per-user windows.
type VTCBasic struct {
	traced
	cfg     VTCConfig
	now     func() time.Time
	width   int64 // bucket width in nanoseconds
	rr      rotor
	evicted func(table string, n int)

	mu        sync.Mutex
	users     map[string]*vtcUser
	lo, hi    float64 // smallest and largest positive user totals; 0 when none
	lastSweep int64
	scores    []float64 // scratch
}

// vtcUser is one user's window: buckets[e%vtcBuckets] holds the tokens
// charged during bucket epoch e, valid while epochs[...] == e.
type vtcUser struct {
	epochs [vtcBuckets]int64
	tokens [vtcBuckets]float64
	total  float64
}

// advance drops buckets older than the window ending at epoch and returns
// the remaining total.
func (u *vtcUser) advance(epoch int64) float64 {
	u.total = 0
	for i := range u.tokens {
		if u.epochs[i] <= epoch-vtcBuckets {
			u.tokens[i] = 0
		}
		u.total += u.tokens[i]
	}
	return u.total
}

func (u *vtcUser) add(epoch int64, tokens float64) {
	u.advance(epoch)
	s := int(epoch % vtcBuckets)
	if u.epochs[s] != epoch {
		u.epochs[s], u.tokens[s] = epoch, 0
	}
	u.tokens[s] += tokens
	u.total += tokens
}

var (
	_ Picker   = (*VTCBasic)(nil)
	_ Finisher = (*VTCBasic)(nil)
)

// NewVTCBasic validates cfg and returns a vtc-basic picker. now is the
// clock; nil means time.Now.
func NewVTCBasic(cfg VTCConfig, now func() time.Time) (*VTCBasic, error) {
	if err := cfg.ValidateAt("vtc"); err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &VTCBasic{
		cfg:       cfg,
		now:       now,
		width:     int64(cfg.Window) / vtcBuckets,
		users:     make(map[string]*vtcUser),
		lastSweep: math.MinInt64,
		evicted:   func(string, int) {},
	}, nil
}

// epoch returns the current bucket number. Caller holds p.mu.
func (p *VTCBasic) epoch() int64 {
	ns := p.now().UnixNano()
	e := ns / p.width
	if ns < 0 && ns%p.width != 0 {
		e-- // floor, for clocks before 1970 in tests
	}
	return e
}

// sweep, at most once per bucket, forgets users with nothing left in the
// window and recomputes the smallest and largest totals. Between sweeps
// charges only raise hi, so lo may lag by one bucket. Caller holds p.mu.
func (p *VTCBasic) sweep(epoch int64) {
	if epoch == p.lastSweep {
		return
	}
	p.lastSweep = epoch
	p.lo, p.hi = 0, 0
	for name, u := range p.users {
		t := u.advance(epoch)
		if t <= 0 {
			delete(p.users, name)
			continue
		}
		if p.lo == 0 || t < p.lo {
			p.lo = t
		}
		p.hi = max(p.hi, t)
	}
}

// evictLightest makes room for a new user: it forgets the users with
// nothing left in the window and, if that is not enough, the lightest
// eighth of the table, then recomputes lo and hi. Evicting a batch keeps the
// cost per new user constant (one sort per MaxUsers/8 arrivals). Caller
// holds p.mu.
func (p *VTCBasic) evictLightest(epoch int64) {
	type entry struct {
		name  string
		total float64
	}
	all := make([]entry, 0, len(p.users))
	for name, u := range p.users {
		all = append(all, entry{name, u.advance(epoch)})
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Compare(a.total, b.total) })
	expired := 0
	for expired < len(all) && all[expired].total <= 0 {
		expired++
	}
	n := expired
	if len(all)-n >= p.cfg.MaxUsers {
		n = len(all) - p.cfg.MaxUsers + max(1, p.cfg.MaxUsers/8)
	}
	for _, e := range all[:n] {
		delete(p.users, e.name)
	}
	p.lo, p.hi = 0, 0
	if n < len(all) {
		p.lo, p.hi = all[n].total, all[len(all)-1].total
	}
	if n > expired {
		p.evicted(TableUsers, n-expired) // expired users are not evictions: the sweep drops them too
	}
}

// charge adds tokens to user's window. Caller holds p.mu.
func (p *VTCBasic) charge(user string, epoch int64, tokens float64) {
	if user == "" || tokens <= 0 {
		return
	}
	u := p.users[user]
	if u == nil {
		if len(p.users) >= p.cfg.MaxUsers {
			p.evictLightest(epoch)
		}
		u = &vtcUser{}
		p.users[user] = u
	}
	u.add(epoch, tokens)
	if p.lo == 0 || u.total < p.lo {
		p.lo = u.total
	}
	p.hi = max(p.hi, u.total)
}

// Usage returns user's weighted tokens in the current window.
func (p *VTCBasic) Usage(user string) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if u := p.users[user]; u != nil {
		return u.advance(p.epoch())
	}
	return 0
}

// Pick implements Picker.
func (p *VTCBasic) Pick(req *Request, cands []Candidate) int {
	p.mu.Lock()
	defer p.mu.Unlock()

	epoch := p.epoch()
	p.sweep(epoch)

	n := len(cands)
	fairness := req.User != ""
	var position float64
	if fairness {
		var tokens float64
		if u := p.users[req.User]; u != nil {
			tokens = u.advance(epoch)
		}
		lo, hi := p.cfg.MinTokens, p.cfg.MaxTokens
		if p.hi > 0 {
			lo, hi = p.lo, p.hi
		}
		bucket := max(p.cfg.MinTokens, (lo+hi)/2)
		position = min(tokens/bucket, float64(n-1))
	}

	p.scores = growFloats(p.scores, n)
	scores := p.scores
	best, count := math.Inf(1), 0
	for i, c := range cands {
		s := p.cfg.UtilizationWeight * min(float64(max(c.InFlight, 0))/p.cfg.MaxReplicaLoad, 1)
		if fairness {
			s += p.cfg.FairnessWeight * math.Abs(float64(i)-position)
		}
		scores[i] = s
		switch {
		case s < best:
			best, count = s, 1
		case s == best:
			count++
		}
	}
	chosen := nthTied(n, p.rr.turn(count), func(i int) bool { return scores[i] == best })

	p.charge(req.User, epoch, float64(max(req.InputTokens, 0))*p.cfg.InputTokenWeight)
	p.tracer.Record(cands, scores, chosen, true, "")
	return chosen
}

// Done implements Finisher: the user is charged for the output tokens.
func (p *VTCBasic) Done(req *Request, _ string, outputTokens int) {
	if req.User == "" || outputTokens <= 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.charge(req.User, p.epoch(), float64(outputTokens)*p.cfg.OutputTokenWeight)
}
