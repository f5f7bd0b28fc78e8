package upstream

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"sync"
	"time"
)

// responseBody wraps the replica's body with the stream-idle timeout, output
// token counting and the request's end-of-life accounting.
//
// Read and Close may run concurrently (Close unblocks a stuck Read by
// cancelling the upstream request); mu guards the fields below it. The
// blocking read itself runs outside mu.
type responseBody struct {
	a      *attempt
	rc     io.ReadCloser
	idle   time.Duration
	timer  *time.Timer // armed only while a Read waits on the replica
	status int
	busy   bool // the answer said the replica is busy (429, 503 with Retry-After)

	mu       sync.Mutex
	eof      bool
	failed   bool
	fail     outcome
	err      error
	closed   bool
	tokens   tokenCounter
	override int // from SetOutputTokens; -1 when unset
}

var _ io.ReadCloser = (*responseBody)(nil)

func newResponseBody(a *attempt) *responseBody {
	b := &responseBody{
		a:        a,
		rc:       a.resp.Body,
		idle:     a.p.cfg.Timeouts.StreamIdle.Std(),
		status:   a.resp.StatusCode,
		busy:     busy(a.resp.StatusCode, a.resp.Header),
		override: -1,
	}
	b.tokens.init(a.resp.Header.Get("Content-Type"))
	b.timer = time.AfterFunc(b.idle, func() { a.cancel(errStreamIdle) })
	b.timer.Stop()
	return b
}

func (b *responseBody) Read(p []byte) (int, error) {
	// The idle clock runs only while we wait on the replica, so a caller
	// that is slow to write to its own client is not mistaken for an idle
	// replica.
	b.timer.Reset(b.idle)
	n, err := b.rc.Read(p)
	b.timer.Stop()

	b.mu.Lock()
	defer b.mu.Unlock()
	if n > 0 {
		b.tokens.feed(p[:n])
	}
	switch {
	case err == nil:
	case err == io.EOF:
		b.eof = true
	case b.failed:
		err = b.err
	case b.closed:
		// Close raced this Read; the caller is done with the body anyway.
	default:
		b.failed = true
		b.fail, b.err = b.classify(err)
		err = b.err
	}
	return n, err
}

// classify names why a read failed; called with mu held.
func (b *responseBody) classify(err error) (outcome, error) {
	a := b.a
	switch {
	case a.parent.Err() != nil:
		return outcomeCanceled, fmt.Errorf("pool %s: %w", a.p.cfg.Name, a.parent.Err())
	case context.Cause(a.actx) == errStreamIdle:
		a.p.observe(a.r, false)
		return outcomeTimeout, &UpstreamError{Pool: a.p.cfg.Name, Replica: a.r.id,
			Err: fmt.Errorf("%w: no response bytes for %s", ErrUpstreamTimeout, b.idle)}
	default:
		a.p.observe(a.r, false)
		return outcomeStreamError, &UpstreamError{Pool: a.p.cfg.Name, Replica: a.r.id, Err: err}
	}
}

// Close ends the request. Extra calls are no-ops.
func (b *responseBody) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	o := outcomeOK
	switch {
	case b.failed:
		o = b.fail
	case b.busy:
		o = outcomeBusy
	case b.status >= 500:
		o = outcomeErrorStatus
	case !b.eof:
		o = outcomeCanceled // the caller stopped reading early
	}
	tokens := b.override
	if tokens < 0 {
		tokens = b.tokens.count()
	}
	eof := b.eof
	b.mu.Unlock()

	b.timer.Stop()
	var err error
	if eof {
		// Fully read: the connection is back in the idle pool; closing
		// first keeps it there.
		err = b.rc.Close()
		b.a.cancel(errBodyClosed)
	} else {
		// Cancel first: it unblocks a concurrent Read and drops the stream.
		b.a.cancel(errBodyClosed)
		err = b.rc.Close()
	}
	b.a.p.release(b.a.r, b.a.req, o, tokens)
	return err
}

// maxUsageCapture bounds how much of a JSON body is kept to read
// usage.completion_tokens; larger bodies report 0 unless SetOutputTokens.
const maxUsageCapture = 1 << 20

// tokenCounter estimates output tokens from the bytes passing through.
type tokenCounter struct {
	mode   int // counterNone, counterSSE, counterJSON
	match  int // progress through "data:" at a line start; see feed
	events int
	buf    []byte
}

const (
	counterNone = iota
	counterSSE
	counterJSON
)

const (
	ssePrefix      = "data:"
	sseNoMatch     = -1 // inside a line that is not a data line
	sseAfterPrefix = -2 // saw "data:", waiting for the payload's first byte
)

func (t *tokenCounter) init(contentType string) {
	mt, _, _ := mime.ParseMediaType(contentType)
	switch mt {
	case "text/event-stream":
		t.mode = counterSSE
	case "application/json":
		t.mode = counterJSON
	}
}

// feed scans p; SSE state carries across calls, so an event split between
// two reads is counted once.
func (t *tokenCounter) feed(p []byte) {
	switch t.mode {
	case counterSSE:
		for _, c := range p {
			switch {
			case c == '\n':
				t.match = 0
			case t.match == sseAfterPrefix:
				if c == ' ' {
					continue
				}
				if c != '[' { // "data: [DONE]" is not a chunk
					t.events++
				}
				t.match = sseNoMatch
			case t.match >= 0:
				if c != ssePrefix[t.match] {
					t.match = sseNoMatch
				} else if t.match++; t.match == len(ssePrefix) {
					t.match = sseAfterPrefix
				}
			}
		}
	case counterJSON:
		if len(t.buf)+len(p) > maxUsageCapture {
			t.mode, t.buf = counterNone, nil
			return
		}
		t.buf = append(t.buf, p...)
	}
}

func (t *tokenCounter) count() int {
	switch t.mode {
	case counterSSE:
		return t.events
	case counterJSON:
		var v struct {
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(t.buf, &v) != nil {
			return 0
		}
		return v.Usage.CompletionTokens
	}
	return 0
}
