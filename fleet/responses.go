package fleet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"

	"github.com/redis/rueidis"
)

// Responses is the fleet's shared table of OpenAI Responses ids and the pool and replica
// that stored each (vLLM keeps a stored response in that replica's memory only), the second
// tier behind each gateway's own table: a conversation continued through another gateway
// still reaches its replica. It satisfies server.SharedResponses.
//
// Keys are "<prefix>:r:" + the first 16 bytes of SHA-256(id), hex (ids in GET paths are the
// client's; the key's size is fixed whatever it sends); the value is "pool NUL replica".
// Entries expire after the TTL each write carries.
//
// Lossy by design, like Cache: a lookup that fails or times out is a miss (the client is
// told the id is unknown), and writes and deletions go through a bounded queue, dropped when
// it is full or Redis is down (counted in triage_fleet_errors_total{op="responses_set"}).
type Responses struct {
	conn   *Conn
	writes chan responsesWrite
}

type responsesWrite struct {
	key, val string // val "" deletes
	ttl      time.Duration
}

// NewResponses returns the shared table over conn. Run writes its queued changes.
func NewResponses(conn *Conn) *Responses {
	return &Responses{conn: conn, writes: make(chan responsesWrite, conn.cfg.Cache.WriteQueue)}
}

func (r *Responses) key(id string) string {
	sum := sha256.Sum256([]byte(id))
	return r.conn.key("r", hex.EncodeToString(sum[:16]))
}

// maxHome bounds a stored value (a pool name and a replica id).
const maxHome = 256

// Get looks id up in one round trip bounded by fleet.command_timeout. While Redis is down,
// or on any error, it is a miss.
func (r *Responses) Get(ctx context.Context, id string) (pool, replica string, ok bool) {
	cl, err := r.conn.get()
	if err != nil {
		return "", "", false
	}
	ctx, cancel := r.conn.commandContext(ctx)
	defer cancel()
	s, err := cl.Do(ctx, cl.B().Get().Key(r.key(id)).Build()).ToString()
	r.conn.result("responses_get", err)
	if err != nil || len(s) > maxHome {
		return "", "", false
	}
	pool, replica, ok = strings.Cut(s, "\x00")
	return pool, replica, ok && pool != "" && replica != ""
}

// Set queues id's home for writing with the given TTL. It never blocks.
func (r *Responses) Set(id, pool, replica string, ttl time.Duration) {
	val := pool + "\x00" + replica
	if pool == "" || replica == "" || len(val) > maxHome || ttl <= 0 {
		return
	}
	r.queue(responsesWrite{key: r.key(id), val: val, ttl: ttl})
}

// Delete queues id's removal. It never blocks.
func (r *Responses) Delete(id string) { r.queue(responsesWrite{key: r.key(id)}) }

func (r *Responses) queue(w responsesWrite) {
	if !r.conn.Up() {
		r.conn.m.errors.WithLabelValues("responses_set").Inc()
		return
	}
	select {
	case r.writes <- w:
	default:
		r.conn.m.errors.WithLabelValues("responses_set").Inc()
	}
}

// Run writes queued changes, pipelining whatever has queued up, until ctx ends.
func (r *Responses) Run(ctx context.Context) error {
	batch := make([]responsesWrite, 0, maxWriteBatch)
	for {
		select {
		case <-ctx.Done():
			return nil
		case w := <-r.writes:
			batch = append(batch[:0], w)
		}
	fill:
		for len(batch) < maxWriteBatch {
			select {
			case w := <-r.writes:
				batch = append(batch, w)
			default:
				break fill
			}
		}
		r.write(ctx, batch)
	}
}

func (r *Responses) write(ctx context.Context, batch []responsesWrite) {
	cl, err := r.conn.get()
	if err != nil {
		r.conn.m.errors.WithLabelValues("responses_set").Add(float64(len(batch)))
		return
	}
	cmds := make(rueidis.Commands, len(batch))
	for i, w := range batch {
		if w.val == "" {
			cmds[i] = cl.B().Del().Key(w.key).Build()
		} else {
			cmds[i] = cl.B().Set().Key(w.key).Value(w.val).Px(w.ttl).Build()
		}
	}
	wctx, cancel := context.WithTimeout(ctx, max(r.conn.cfg.CommandTimeout, time.Second))
	defer cancel()
	for _, res := range cl.DoMulti(wctx, cmds...) {
		r.conn.result("responses_set", res.Error())
	}
}
