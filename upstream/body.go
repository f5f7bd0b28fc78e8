package upstream

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"strings"
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
	firstTok bool // the first token event was seen (and reported to a TTFTObserver)
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
		if !b.firstTok && b.tokens.events > 0 {
			b.firstTok = true
			b.observeTTFT()
		}
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

// observeTTFT measures the time to the first token event of a streamed 2xx
// answer: into triage_upstream_ttft_seconds, against the request's TTFT
// target when it has one (triage_upstream_slo_total), and to the picker when
// it learns from it. Called with mu held, once: the observer takes its own
// short lock and never calls back.
func (b *responseBody) observeTTFT() {
	a := b.a
	if b.status < 200 || b.status > 299 {
		return
	}
	ttft := time.Since(a.start)
	a.r.metrics.ttft.Observe(ttft.Seconds())
	target := a.p.sloTarget
	if a.req.TTFTTarget > 0 {
		target = a.req.TTFTTarget
	}
	switch {
	case target <= 0:
	case ttft <= target:
		a.p.sloMet.Inc()
	default:
		a.p.sloMissed.Inc()
	}
	if o := a.by.ttfts; o != nil {
		o.ObserveTTFT(a.req, a.r.id, a.load, ttft)
	}
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
	// Only a 2xx answer ran the model; an error body's missing usage is no gap.
	rep := report{answered: b.status >= 200 && b.status < 300, unpriced: b.a.unpriced}
	rep.usage, rep.metered = b.tokens.reported()
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
	b.a.p.release(b.a.by, b.a.r, b.a.req, o, tokens, rep)
	return err
}

// maxUsageCapture bounds how much of a JSON body is kept to read its usage;
// a larger body reports none (and 0 output tokens unless SetOutputTokens).
const maxUsageCapture = 1 << 20

// maxUsageLine bounds how much of one SSE data line is kept to look for a
// usage object in it. A usage chunk is a few hundred bytes; a longer line is
// a token chunk and is only counted.
const maxUsageLine = 64 << 10

// tokenCounter follows the bytes passing through for the answer's token
// counts: the replica's usage object when it sends one (the JSON body's, or
// in a stream the last data line that carries a non-null one) and, for a
// stream, the number of chunks, the output estimate of last resort.
type tokenCounter struct {
	mode   int // counterNone, counterSSE, counterJSON
	match  int // progress through "data:" at a line start; see feed
	events int
	buf    []byte // JSON: the body so far; SSE: the current data line's payload
	skip   bool   // SSE: the current payload outgrew maxUsageLine
	usage  Usage
	full   bool // usage holds the replica's numbers, both of them
	output bool // usage.CompletionTokens holds the replica's number
	parsed bool // JSON: buf was parsed (once, at the end)
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
	sseInData      = -3 // inside a data line's payload, keeping it in buf
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
// two reads is counted once and a usage chunk split between them is read
// whole.
func (t *tokenCounter) feed(p []byte) {
	switch t.mode {
	case counterSSE:
		for i := 0; i < len(p); i++ {
			if t.match == sseInData {
				j := bytes.IndexByte(p[i:], '\n')
				if j < 0 {
					t.keep(p[i:])
					return
				}
				t.keep(p[i : i+j])
				t.endData()
				t.match = 0
				i += j
				continue
			}
			c := p[i]
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
				t.match, t.buf, t.skip = sseInData, t.buf[:0], false
				i-- // c is the payload's first byte
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

// keep adds b to the current data line's payload, up to maxUsageLine.
func (t *tokenCounter) keep(b []byte) {
	if t.skip {
		return
	}
	if len(t.buf)+len(b) > maxUsageLine {
		t.buf, t.skip = t.buf[:0], true
		return
	}
	t.buf = append(t.buf, b...)
}

// endData looks for usage in the data line just ended. The last one seen
// wins: a server sending usage in every chunk (vLLM's continuous_usage_stats)
// has its running totals there and the final ones last.
func (t *tokenCounter) endData() {
	if t.skip {
		return
	}
	if !tokenEvent(t.buf) {
		t.events-- // counted when its payload began; it carries no token
	}
	if !bytes.Contains(t.buf, []byte(`"usage"`)) {
		return
	}
	if u, full, output := parseUsage(t.buf); output {
		if !full && t.full {
			// Anthropic streams give the prompt's count in message_start and the output's
			// in message_delta: the later, output-only report completes the earlier one.
			u.PromptTokens, full = t.usage.PromptTokens, true
		}
		t.usage, t.full, t.output = u, full, output
	}
}

// tokenEvent reports whether an SSE data payload carries generated tokens: a chat or
// completion chunk (no top-level "type"), or a typed event of the Messages and Responses
// streams that is a delta (content_block_delta, response.output_text.delta, ...). Their other
// events (message_start, ping, response.created, ...) are bookkeeping, some sent before the
// first token, so they count neither as the first token (TTFT) nor as output.
func tokenEvent(data []byte) bool {
	if !bytes.Contains(data, []byte(`"type"`)) {
		return true // the cheap test first: chat chunks without tool calls pass here
	}
	typ, st := scanEventType(data)
	switch {
	case st == scanFallBack:
		return tokenEventJSON(data)
	case st == scanNone || len(typ) == 0:
		return true
	}
	return string(typ) == "content_block_delta" || bytes.HasSuffix(typ, []byte(".delta"))
}

// tokenEventJSON is tokenEvent's read with encoding/json (see parseUsageJSON).
func tokenEventJSON(data []byte) bool {
	var v struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(data, &v) != nil || v.Type == "" {
		return true
	}
	return v.Type == "content_block_delta" || strings.HasSuffix(v.Type, ".delta")
}

// parse reads a JSON body's usage, once: call it after the body's end.
func (t *tokenCounter) parse() {
	if t.mode == counterJSON && !t.parsed {
		t.parsed = true
		t.usage, t.full, t.output = parseUsage(t.buf)
	}
}

// reported returns the replica's usage, if it sent a complete one.
func (t *tokenCounter) reported() (Usage, bool) {
	t.parse()
	return t.usage, t.full
}

// count is the output token count for the picker: the reported completion
// tokens, else for a stream the number of chunks.
func (t *tokenCounter) count() int {
	if t.parse(); t.output {
		return t.usage.CompletionTokens
	}
	if t.mode == counterSSE {
		return t.events
	}
	return 0
}
