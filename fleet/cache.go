package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/redis/rueidis"
)

// Cache is the fleet's shared result cache: the second tier behind each gateway's own
// (ristretto). It maps model version + normalised text to a small value the router encodes
// (the model's output — P(slow), token count, stage — never a decision), so a text
// classified by one gateway is a hit on every other. It satisfies router.SharedCache.
//
// Keys are "<prefix>:c:" + the first 16 bytes of SHA-256(version NUL text), hex: fixed
// size whatever the text, and a new model version (a reload) never finds the old one's
// entries. Entries expire after fleet.cache.ttl; the memory bound is the Redis server's
// maxmemory with an LRU policy.
//
// Lossy by design, like any cache: lookups that fail or time out are misses, writes go
// through a bounded queue and are dropped when it is full or Redis is down.
type Cache struct {
	conn   *Conn
	ttl    time.Duration
	writes chan cacheWrite
}

type cacheWrite struct {
	key string
	val string
}

// NewCache returns the shared tier over conn. Run writes its queued results.
func NewCache(conn *Conn) *Cache {
	return &Cache{conn: conn, ttl: conn.cfg.Cache.TTL, writes: make(chan cacheWrite, conn.cfg.Cache.WriteQueue)}
}

func (c *Cache) key(version, text string) string {
	h := sha256.New()
	h.Write([]byte(version))
	h.Write([]byte{0})
	h.Write([]byte(text))
	var sum [sha256.Size]byte
	return c.conn.key("c", hex.EncodeToString(h.Sum(sum[:0])[:16]))
}

// maxValue bounds a stored value; anything larger is refused on write and ignored on read.
const maxValue = 64

// Get looks texts up under version in one round trip. found[i] reports a hit for texts[i]
// and vals[i] is its value. While Redis is down, or on any error, everything is a miss.
func (c *Cache) Get(ctx context.Context, version string, texts []string) (vals []string, found []bool) {
	vals, found = make([]string, len(texts)), make([]bool, len(texts))
	if len(texts) == 0 {
		return
	}
	cl, err := c.conn.get()
	if err != nil {
		return
	}
	keys := make([]string, len(texts))
	for i, t := range texts {
		keys[i] = c.key(version, t)
	}
	ctx, cancel := c.conn.commandContext(ctx)
	defer cancel()
	var cmd rueidis.Completed
	if len(keys) == 1 {
		cmd = cl.B().Get().Key(keys[0]).Build()
	} else {
		cmd = cl.B().Mget().Key(keys...).Build()
	}
	res := cl.Do(ctx, cmd)
	if len(keys) == 1 {
		s, err := res.ToString()
		c.conn.result("cache_get", err)
		if err != nil {
			c.count(len(texts), "miss", err)
			return
		}
		vals[0], found[0] = s, len(s) > 0 && len(s) <= maxValue
		c.record(found)
		return
	}
	arr, err := res.ToArray()
	c.conn.result("cache_get", err)
	if err != nil || len(arr) != len(keys) {
		c.count(len(texts), "miss", err)
		return
	}
	for i, m := range arr {
		if s, err := m.ToString(); err == nil {
			vals[i], found[i] = s, len(s) > 0 && len(s) <= maxValue
		}
	}
	c.record(found)
	return
}

func (c *Cache) record(found []bool) {
	for _, f := range found {
		if f {
			c.conn.m.cache.WithLabelValues("hit").Inc()
		} else {
			c.conn.m.cache.WithLabelValues("miss").Inc()
		}
	}
}

// count records n lookups that failed: a Redis "nil" is a plain miss, anything else an
// error (also a miss to the caller).
func (c *Cache) count(n int, result string, err error) {
	if err != nil && !rueidis.IsRedisNil(err) {
		result = "error"
	}
	c.conn.m.cache.WithLabelValues(result).Add(float64(n))
}

// Set queues a value for writing. It never blocks: when the queue is full or Redis is down
// the write is dropped (and counted).
func (c *Cache) Set(version, text, val string) {
	if !c.conn.Up() || len(val) == 0 || len(val) > maxValue {
		c.conn.m.cacheDropped.Inc()
		return
	}
	select {
	case c.writes <- cacheWrite{key: c.key(version, text), val: val}:
	default:
		c.conn.m.cacheDropped.Inc()
	}
}

// maxWriteBatch bounds one pipelined write.
const maxWriteBatch = 256

// Run writes queued results, pipelining whatever has queued up, until ctx ends.
func (c *Cache) Run(ctx context.Context) error {
	batch := make([]cacheWrite, 0, maxWriteBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case w := <-c.writes:
			batch = append(batch[:0], w)
		}
	fill:
		for len(batch) < maxWriteBatch {
			select {
			case w := <-c.writes:
				batch = append(batch, w)
			default:
				break fill
			}
		}
		c.write(ctx, batch)
	}
}

func (c *Cache) write(ctx context.Context, batch []cacheWrite) {
	cl, err := c.conn.get()
	if err != nil {
		c.conn.m.cacheDropped.Add(float64(len(batch)))
		return
	}
	cmds := make(rueidis.Commands, len(batch))
	for i, w := range batch {
		cmds[i] = cl.B().Set().Key(w.key).Value(w.val).Px(c.ttl).Build()
	}
	wctx, cancel := context.WithTimeout(ctx, max(c.conn.cfg.CommandTimeout, time.Second))
	defer cancel()
	for _, r := range cl.DoMulti(wctx, cmds...) {
		if err := r.Error(); err != nil {
			c.conn.result("cache_set", err)
			c.conn.m.cacheDropped.Inc()
		}
	}
}
