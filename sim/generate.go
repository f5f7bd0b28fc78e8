package sim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

func (s *Server) handleChat(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, chatEndpoint)
}

func (s *Server) handleCompletion(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, completionEndpoint)
}

func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, messagesEndpoint)
}

func (s *Server) handleResponses(w http.ResponseWriter, r *http.Request) {
	s.generate(w, r, responsesEndpoint)
}

// readBody reads a request body up to maxBodyBytes, answering 400 or 413 itself when it
// cannot.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, kind endpoint) ([]byte, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err == nil {
		return body, true
	}
	s.metrics.rejected.WithLabelValues(rejectBadRequest).Inc()
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeErrorFor(w, kind, &apiError{status: http.StatusRequestEntityTooLarge, typ: "invalid_request_error",
			message: fmt.Sprintf("request body larger than %d bytes", tooBig.Limit)})
		return nil, false
	}
	writeErrorFor(w, kind, badRequest("", "reading request body: %v", err))
	return nil, false
}

// draw holds one request's random numbers, drawn together so a given seed
// and arrival order always give the same outcomes.
type draw struct {
	speed float64 // latency factor in [1-Jitter, 1+Jitter]
	fail  bool    // answer 500
	cut   bool    // cut the stream (streaming requests only)
}

func (s *Server) drawFor(stream bool) draw {
	s.rngMu.Lock()
	u1, u2, u3 := s.rng.Float64(), s.rng.Float64(), s.rng.Float64()
	s.rngMu.Unlock()
	return draw{
		speed: 1 + s.cfg.Jitter*(2*u1-1),
		fail:  u2 < s.cfg.ErrorRate,
		cut:   stream && u3 < s.cfg.CloseMidStreamRate,
	}
}

// job is one admitted request on its way through the engine.
type job struct {
	req          genRequest
	id           string
	created      int64
	arrival      time.Time
	hash         uint64 // promptHash(req.prompt)
	promptTokens int
	cachedTokens int
	outTokens    int
	finish       string // stop or length, once all tokens are out
	speed        float64
	// The KV hand-off (disagg.go): a prefill for a remote decode, or a decode
	// of transferred blocks.
	remoteDecode, transferred bool
}

func (j *job) usage() usage {
	return usage{
		PromptTokens:        j.promptTokens,
		CompletionTokens:    j.outTokens,
		TotalTokens:         j.promptTokens + j.outTokens,
		PromptTokensDetails: promptTokensDetails{CachedTokens: j.cachedTokens},
	}
}

// generate runs one generation request: stall, parse, fault, queue for a
// slot, prefill (cheaper for a cached prefix), then decode token by token.
func (s *Server) generate(w http.ResponseWriter, r *http.Request, kind endpoint) {
	// Close cuts in-flight requests through their context.
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(s.closed, cancel)()

	if s.closed.Err() != nil {
		s.metrics.rejected.WithLabelValues(rejectClosed).Inc()
		writeErrorFor(w, kind, &apiError{status: http.StatusServiceUnavailable, typ: "server_error", message: "server is shutting down"})
		return
	}
	if s.cfg.StallFirstByte > 0 {
		if err := s.clock.Sleep(ctx, s.cfg.StallFirstByte); err != nil {
			return // client gone during the stall; nothing was admitted
		}
	}

	body, ok := s.readBody(w, r, kind)
	if !ok {
		return
	}
	var (
		req    genRequest
		apiErr *apiError
	)
	switch kind {
	case chatEndpoint:
		req, apiErr = parseChat(body, s.cfg.Model)
	case completionEndpoint:
		req, apiErr = parseCompletion(body, s.cfg.Model)
	case messagesEndpoint:
		req, apiErr = parseMessages(body, s.cfg.Model)
	case responsesEndpoint:
		req, apiErr = s.parseResponses(body, s.cfg.Model)
	}
	if apiErr != nil {
		s.metrics.rejected.WithLabelValues(rejectBadRequest).Inc()
		writeErrorFor(w, kind, apiErr)
		return
	}

	kv, apiErr := parseKVTransfer(body)
	if apiErr != nil {
		s.metrics.rejected.WithLabelValues(rejectBadRequest).Inc()
		writeError(w, apiErr)
		return
	}

	d := s.drawFor(req.stream)
	if d.fail {
		s.metrics.rejected.WithLabelValues(rejectInjected).Inc()
		writeErrorFor(w, kind, &apiError{status: http.StatusInternalServerError, typ: "server_error", message: "injected fault (error_rate)"})
		return
	}

	now := s.clock.Now()
	j := &job{
		req:          req,
		id:           fmt.Sprintf("%s-%s-%d", idKind(kind), s.idPrefix, s.ids.Add(1)),
		created:      now.Unix(),
		arrival:      now,
		hash:         promptHash(req.prompt),
		promptTokens: CountTokens(req.prompt),
		outTokens:    s.cfg.DefaultMaxTokens,
		finish:       finishStop,
		speed:        d.speed,
	}
	if req.maxTokens > 0 {
		// A real model asked for n tokens and given them stopped on the limit.
		j.outTokens, j.finish = req.maxTokens, finishLength
	}
	if j.outTokens > s.cfg.MaxOutputTokens {
		j.outTokens, j.finish = s.cfg.MaxOutputTokens, finishLength
	}

	blocks := (len(req.prompt) + 4*j.outTokens + s.cfg.BlockChars - 1) / s.cfg.BlockChars
	if err := s.sched.acquire(ctx, blocks); err != nil {
		if errors.Is(err, errQueueFull) {
			s.metrics.rejected.WithLabelValues(rejectQueueFull).Inc()
			w.Header().Set("Retry-After", "1")
			writeErrorFor(w, kind, &apiError{status: http.StatusTooManyRequests, typ: "rate_limit_error",
				message: fmt.Sprintf("replica %s is full: %d running, %d waiting", s.cfg.Name, s.cfg.MaxRunning, s.cfg.MaxWaiting)})
			return
		}
		s.metrics.finished.WithLabelValues(finishAbort).Inc()
		return // gone while queued
	}
	defer s.sched.release(blocks)

	var hashes []uint64
	if s.cfg.KVCacheBlocks > 0 {
		hashes = BlockHashes(req.prompt, s.cfg.BlockChars)
	}
	s.applyKV(j, kv)
	if !j.transferred { // a decode of transferred blocks looks nothing up
		j.cachedTokens = min(s.cache.match(hashes)*s.cfg.BlockChars/4, j.promptTokens)
		s.prefixQueries.Add(int64(j.promptTokens))
		s.prefixHits.Add(int64(j.cachedTokens))
		s.metrics.prefixQueries.Add(float64(j.promptTokens))
		s.metrics.prefixHits.Add(float64(j.cachedTokens))
	}
	s.countPromptSources(j)

	computes := int64(1) // a decode of transferred blocks computes no prefill to stall others with
	if j.transferred {
		computes = 0
	}
	s.prefilling.Add(computes)
	slept := s.clock.Sleep(ctx, s.prefillDelay(j))
	s.prefilling.Add(-computes)
	if slept != nil {
		s.metrics.finished.WithLabelValues(finishAbort).Inc()
		return
	}
	var changed func(stored []int, removed []uint64)
	if s.events != nil {
		changed = func(stored []int, removed []uint64) {
			s.events.blocks(req.prompt, hashes, stored, removed, s.cfg.BlockChars)
		}
	}
	s.cache.insert(hashes, changed)
	s.metrics.promptTokens.Add(float64(j.promptTokens))
	firstToken := s.clock.Now()
	s.metrics.ttft.Observe(firstToken.Sub(j.arrival).Seconds())

	w.Header().Set(HeaderCachedTokens, strconv.Itoa(j.cachedTokens))
	setKVHeader(w, j)
	var (
		sent int
		err  error
	)
	if req.stream {
		sent, err = s.stream(ctx, w, j, d.cut)
	} else {
		sent, err = s.respond(ctx, w, j, s.kvAnswer(j, localAddr(r)))
	}
	s.metrics.generationTokens.Add(float64(sent))
	s.observeTokenGaps(firstToken, sent)
	if err != nil {
		s.metrics.finished.WithLabelValues(finishAbort).Inc()
		s.log.Debug("request aborted", "replica", s.cfg.Name, "id", j.id, "tokens_sent", sent, "error", err)
		return
	}
	s.metrics.finished.WithLabelValues(j.finish).Inc()
	s.metrics.e2e.Observe(s.clock.Now().Sub(j.arrival).Seconds())
	s.log.Debug("request done", "replica", s.cfg.Name, "id", j.id, "stream", req.stream,
		"prompt_tokens", j.promptTokens, "cached_tokens", j.cachedTokens, "output_tokens", j.outTokens)
}

// observeTokenGaps records the time per output token of a request that
// sent its first token at first and sent tokens in all: the mean gap, once
// per gap, so that the histogram's sum and count are exact whether the
// tokens were streamed one by one or decoded in one sleep.
func (s *Server) observeTokenGaps(first time.Time, sent int) {
	if sent < 2 {
		return
	}
	gap := s.clock.Now().Sub(first).Seconds() / float64(sent-1)
	for range sent - 1 {
		s.metrics.itl.Observe(gap)
	}
}

func (s *Server) prefillDelay(j *job) time.Duration {
	if j.transferred {
		return s.delay(s.cfg.TTFTBase, j) // the prompt's KV came from the prefill replica
	}
	return s.delay(s.cfg.PrefillDelay(j.promptTokens, j.cachedTokens), j)
}

func idKind(kind endpoint) string {
	switch kind {
	case chatEndpoint:
		return "chatcmpl"
	case messagesEndpoint:
		return "msg"
	case responsesEndpoint:
		return "resp"
	}
	return "cmpl"
}

// respond waits for the whole answer and writes it as one JSON object, with
// kv as its kv_transfer_params when set. It returns the tokens sent (all or
// none).
func (s *Server) respond(ctx context.Context, w http.ResponseWriter, j *job, kv *kvTransferOut) (int, error) {
	if err := s.clock.Sleep(ctx, s.delay(s.decodeStep()*time.Duration(j.outTokens-1), j)); err != nil {
		return 0, err
	}
	text := generatedText(j.hash, j.outTokens)
	u := j.usage()
	switch j.req.kind {
	case messagesEndpoint:
		writeJSON(w, http.StatusOK, j.anthropicMessage())
	case responsesEndpoint:
		writeJSON(w, http.StatusOK, s.finishResponse(j))
	case chatEndpoint:
		if j.req.tool != "" {
			writeJSON(w, http.StatusOK, map[string]any{
				"id": j.id, "object": "chat.completion", "created": j.created, "model": j.req.model,
				"choices": []any{map[string]any{"index": 0, "logprobs": nil, "finish_reason": "tool_calls",
					"message": map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{j.chatToolCall(true)}}}},
				"usage": u,
			})
			break
		}
		writeJSON(w, http.StatusOK, chatCompletion{
			ID: j.id, Object: "chat.completion", Created: j.created, Model: j.req.model,
			Choices: []chatChoice{{Index: 0, Message: chatMessage{Role: "assistant", Content: text}, FinishReason: j.finish}},
			Usage:   u, KVTransferParams: kv,
		})
	default:
		writeJSON(w, http.StatusOK, textCompletion{
			ID: j.id, Object: "text_completion", Created: j.created, Model: j.req.model,
			Choices: []textChoice{{Index: 0, Text: text, FinishReason: &j.finish}},
			Usage:   &u, KVTransferParams: kv,
		})
	}
	return j.outTokens, nil
}

// stream sends one SSE event per token, each flushed on its own, then the
// usage chunk if asked for, then [DONE]. With cut set it aborts the
// connection after CloseAfterChunks token events (panicking with
// http.ErrAbortHandler, which net/http turns into an abrupt close and
// which the deferred slot release survives). It returns the tokens sent.
func (s *Server) stream(ctx context.Context, w http.ResponseWriter, j *job, cut bool) (int, error) {
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)

	cutAt := -1
	if cut {
		cutAt = min(s.cfg.CloseAfterChunks, j.outTokens)
	}
	abort := func(sent int) {
		rc.Flush()
		s.metrics.finished.WithLabelValues(finishAbort).Inc()
		s.metrics.generationTokens.Add(float64(sent))
		s.log.Debug("cutting stream (close_mid_stream_rate)", "replica", s.cfg.Name, "id", j.id, "tokens_sent", sent)
		panic(http.ErrAbortHandler)
	}
	enc := s.encoder(j)
	buf := enc.start(make([]byte, 0, 512))
	for i := range j.outTokens {
		if i == cutAt {
			abort(i)
		}
		if i > 0 {
			if err := s.clock.Sleep(ctx, s.delay(s.decodeStep(), j)); err != nil {
				return i, err
			}
		}
		buf = enc.token(buf, i, tokenText(j.hash, i))
		if len(buf) == 0 {
			continue
		}
		if _, err := w.Write(buf); err != nil {
			return i, fmt.Errorf("write chunk: %w", err)
		}
		if err := rc.Flush(); err != nil && !errors.Is(err, http.ErrNotSupported) {
			return i, fmt.Errorf("flush chunk: %w", err)
		}
		buf = buf[:0]
	}
	if cutAt == j.outTokens {
		abort(j.outTokens)
	}
	buf = enc.end(buf)
	if _, err := w.Write(buf); err != nil {
		return j.outTokens, fmt.Errorf("write end of stream: %w", err)
	}
	rc.Flush()
	return j.outTokens, nil
}

// streamEncoder writes one API's stream: start before the first token's event, one event
// (or none) per token, and what ends the stream.
type streamEncoder interface {
	start(buf []byte) []byte
	token(buf []byte, i int, text string) []byte
	end(buf []byte) []byte
}

func (s *Server) encoder(j *job) streamEncoder {
	switch j.req.kind {
	case messagesEndpoint:
		return messagesEncoder{j: j}
	case responsesEndpoint:
		return &responsesEncoder{s: s, j: j}
	}
	return openAIEncoder{s: s, j: j}
}

// openAIEncoder writes chat and completion chunks ("data:" lines), then the usage chunk if
// asked for, then [DONE].
type openAIEncoder struct {
	s *Server
	j *job
}

func (e openAIEncoder) start(buf []byte) []byte { return buf }

func (e openAIEncoder) token(buf []byte, i int, _ string) []byte {
	j := e.j
	last := i == j.outTokens-1
	if j.req.kind == chatEndpoint && j.req.tool != "" {
		// The call whole with the first token, the finish reason with the last.
		if i == 0 {
			buf = appendEvent(buf, j.toolChunk(map[string]any{"role": "assistant", "tool_calls": []any{j.chatToolCall(false)}}, nil))
		}
		if last {
			reason := "tool_calls"
			buf = appendEvent(buf, j.toolChunk(map[string]any{}, &reason))
		}
		return buf
	}
	var finish *string
	if last {
		finish = &j.finish
	}
	return appendEvent(buf, e.s.chunk(j, i, finish))
}

// chatToolCall is the answer's tool call, in a message (whole) or a stream delta (indexed).
func (j *job) chatToolCall(whole bool) map[string]any {
	c := map[string]any{"id": "call_" + strings.TrimPrefix(j.id, "chatcmpl-"), "type": "function",
		"function": map[string]string{"name": j.req.tool, "arguments": j.toolInput()}}
	if !whole {
		c["index"] = 0
	}
	return c
}

func (j *job) toolChunk(delta map[string]any, finish *string) map[string]any {
	return map[string]any{"id": j.id, "object": "chat.completion.chunk", "created": j.created, "model": j.req.model,
		"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
}

func (e openAIEncoder) end(buf []byte) []byte {
	j := e.j
	if j.req.includeUsage {
		u := j.usage()
		if j.req.kind == chatEndpoint {
			buf = appendEvent(buf, chatChunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created,
				Model: j.req.model, Choices: []chunkChoice{}, Usage: &u})
		} else {
			buf = appendEvent(buf, textCompletion{ID: j.id, Object: "text_completion", Created: j.created,
				Model: j.req.model, Choices: []textChoice{}, Usage: &u})
		}
	}
	return append(buf, "data: [DONE]\n\n"...)
}

// chunk is the stream event of token i. The first chat chunk carries the
// assistant role; the last carries the finish reason.
func (s *Server) chunk(j *job, i int, finish *string) any {
	text := tokenText(j.hash, i)
	if j.req.kind == chatEndpoint {
		d := delta{Content: text}
		if i == 0 {
			d.Role = "assistant"
		}
		return chatChunk{ID: j.id, Object: "chat.completion.chunk", Created: j.created, Model: j.req.model,
			Choices: []chunkChoice{{Index: 0, Delta: d, FinishReason: finish}}}
	}
	return textCompletion{ID: j.id, Object: "text_completion", Created: j.created, Model: j.req.model,
		Choices: []textChoice{{Index: 0, Text: text, FinishReason: finish}}}
}

func appendEvent(buf []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("sim: marshal chunk: %v", err))
	}
	buf = append(buf, "data: "...)
	buf = append(buf, b...)
	return append(buf, "\n\n"...)
}
