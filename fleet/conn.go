package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/rueidis"
)

// ErrDown is returned by operations attempted while Redis is marked down.
var ErrDown = errors.New("fleet: redis is down")

// downAfter consecutive failed commands mark Redis down before the next ping would.
const downAfter = 3

// Options are a fleet connection's collaborators.
type Options struct {
	// Logger receives up/down transitions and startup notes. Nil means slog.Default().
	Logger *slog.Logger
	// Registerer receives the triage_fleet_* metrics. Nil means a private registry.
	Registerer prometheus.Registerer
}

// Conn is a gateway's connection to the fleet's Redis and its view of whether Redis is up.
// Every fleet part (slots, shared cache) goes through it: while it is down they fall back
// to local state at once and make no Redis calls, and they rejoin when it is back up.
//
// The Redis client is rueidis: its automatic pipelining sends the commands that concurrent
// requests issue at the same moment in one round trip without a connection per request,
// which is what keeps fleet mode's per-request cost at a fraction of a millisecond.
type Conn struct {
	cfg Config
	id  string
	log *slog.Logger
	m   *metrics

	mu     sync.Mutex // guards client replacement
	client rueidis.Client
	cur    atomic.Pointer[clientBox] // lock-free read of client for commands

	up    atomic.Bool
	gen   atomic.Uint64 // incremented on every down → up transition
	fails atomic.Int32  // consecutive failed commands
}

type clientBox struct{ c rueidis.Client }

// Dial validates cfg (which must have fleet mode on) and connects. When Redis cannot be
// reached it returns an error if cfg.Required, else a Conn that is down and keeps trying
// from Run; the caller serves in local mode meanwhile.
func Dial(cfg Config, opts Options) (*Conn, error) {
	if !cfg.Enabled {
		return nil, errors.New("fleet: Dial with fleet mode off")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := &Conn{cfg: cfg, id: cfg.GatewayID, log: opts.Logger}
	if c.log == nil {
		c.log = slog.Default()
	}
	if c.id == "" {
		c.id = defaultGatewayID()
	}
	c.log = c.log.With("component", "fleet", "gateway_id", c.id)
	reg := opts.Registerer
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	var err error
	if c.m, err = newMetrics(reg, c); err != nil {
		return nil, err
	}
	if err := c.connect(); err != nil {
		if cfg.Required {
			return nil, fmt.Errorf("fleet: redis %s unreachable and fleet.required is set: %w", redact(cfg.URL), err)
		}
		c.log.Warn("fleet: redis unreachable at startup; serving in local mode until it answers",
			"redis", redact(cfg.URL), "err", err)
		return c, nil
	}
	c.log.Info("fleet: joined", "redis", redact(cfg.URL), "key_prefix", cfg.KeyPrefix)
	return c, nil
}

// defaultGatewayID is the host name plus a random suffix: unique per process, readable in
// Redis.
func defaultGatewayID() string {
	host, _ := os.Hostname()
	if host == "" {
		host = "gateway"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// ID is this gateway's id in the fleet.
func (c *Conn) ID() string { return c.id }

// Config returns the configuration the connection was made with.
func (c *Conn) Config() Config { return c.cfg }

// Up reports whether Redis is believed reachable now.
func (c *Conn) Up() bool { return c.up.Load() }

// generation counts down → up transitions; a part that sees it change has rejoined.
func (c *Conn) generation() uint64 { return c.gen.Load() }

// connect makes a client and pings it; on success Redis is up.
func (c *Conn) connect() error {
	opt, err := rueidis.ParseURL(c.cfg.URL)
	if err != nil {
		return err
	}
	if c.cfg.Password != "" {
		opt.Password = c.cfg.Password
	}
	opt.Dialer.Timeout = c.cfg.DialTimeout
	opt.ConnWriteTimeout = max(c.cfg.DialTimeout, time.Second)
	opt.DisableCache = true // no server-assisted client cache: ristretto is the first tier
	opt.ClientName = "triage-" + c.id
	opt.DisableRetry = true // a failed command is a miss or a shed, never a hidden wait
	cl, err := rueidis.NewClient(opt)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.DialTimeout)
	defer cancel()
	if err := cl.Do(ctx, cl.B().Ping().Build()).Error(); err != nil {
		cl.Close()
		return err
	}
	c.mu.Lock()
	old := c.client
	c.client = cl
	c.cur.Store(&clientBox{cl})
	c.mu.Unlock()
	if old != nil {
		old.Close()
	}
	c.setUp(true, nil)
	return nil
}

// get returns the client while Redis is up, else ErrDown.
func (c *Conn) get() (rueidis.Client, error) {
	if !c.up.Load() {
		return nil, ErrDown
	}
	b := c.cur.Load()
	if b == nil {
		return nil, ErrDown
	}
	return b.c, nil
}

// result folds a command's outcome into the health state: a Redis error reply (the command
// reached a working server) is not a connection failure; anything else counts, and
// downAfter of them in a row mark Redis down before the next ping would.
func (c *Conn) result(op string, err error) {
	if err == nil || rueidis.IsRedisNil(err) {
		c.fails.Store(0)
		return
	}
	c.m.errors.WithLabelValues(op).Inc()
	var re *rueidis.RedisError
	if errors.As(err, &re) {
		return
	}
	if c.fails.Add(1) >= downAfter {
		c.setUp(false, err)
	}
}

func (c *Conn) setUp(up bool, err error) {
	if c.up.Swap(up) == up {
		return
	}
	c.fails.Store(0)
	if up {
		c.gen.Add(1)
		c.log.Info("fleet: redis is up; using the fleet's shared state", "redis", redact(c.cfg.URL))
		return
	}
	c.log.Warn("fleet: redis is down; falling back to local state", "redis", redact(c.cfg.URL), "err", err)
}

// Close closes the client; the connection is down from then on.
func (c *Conn) Close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.up.Store(false)
	c.cur.Store(nil)
	if c.client != nil {
		c.client.Close()
		c.client = nil
	}
}

// Run pings Redis every CheckInterval while it is up and reconnects while it is down, until
// ctx ends; then it closes the client.
func (c *Conn) Run(ctx context.Context) error {
	t := time.NewTicker(c.cfg.CheckInterval)
	defer t.Stop()
	defer c.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		c.check(ctx)
	}
}

func (c *Conn) check(ctx context.Context) {
	b := c.cur.Load()
	if b == nil || !c.up.Load() {
		if err := c.connect(); err != nil {
			c.m.errors.WithLabelValues("connect").Inc()
		}
		return
	}
	pctx, cancel := context.WithTimeout(ctx, max(c.cfg.CommandTimeout, c.cfg.CheckInterval))
	defer cancel()
	if err := b.c.Do(pctx, b.c.B().Ping().Build()).Error(); err != nil && ctx.Err() == nil {
		c.m.errors.WithLabelValues("ping").Inc()
		c.setUp(false, err)
	}
}

// key builds a key under the fleet's prefix. Keys whose operations must stay on one Redis
// Cluster slot share the hash tag "{prefix}".
func (c *Conn) key(parts ...string) string {
	k := c.cfg.KeyPrefix
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

func (c *Conn) taggedKey(parts ...string) string {
	k := "{" + c.cfg.KeyPrefix + "}"
	for _, p := range parts {
		k += ":" + p
	}
	return k
}

// commandContext bounds a request-path command.
func (c *Conn) commandContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.CommandTimeout)
}
