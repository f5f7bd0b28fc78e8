// Package onnx is the request classifier's model: text → P(slow) with the
// HF tokenizer (daulet/tokenizers), the all-MiniLM-L6-v2 encoder on ONNX
// Runtime (yalue/onnxruntime_go), mean pooling with the attention mask and
// L2 normalisation in Go, then the logistic-regression head exported by
// train/classifier.ipynb, also run on ONNX Runtime, with the static first
// stage of package classifier in front.
//
// It is the only package that links ONNX Runtime and the tokenizer (cgo),
// and only cmd/triage wires it in: everything else sees the model through
// router.Model and router.Staged and builds with CGO_ENABLED=0
// (docs/architecture.md). The types it answers with, its Config and its
// Manifest are package classifier's.
//
// Go reproduces the notebook's P(slow) to 1e-4 on every text of
// models/parity.jsonl (TestParity), and the static stage's to 1e-5
// (TestStaticParity).
//
// # Two stages
//
// A static first stage decides most texts in microseconds; MiniLM decides
// the rest. Tokenize turns a text into classifier.Tokens once; StaticScore
// maps them to P(slow) with the static table (classifier.Static; no ONNX
// Runtime call). When Band().Decides(p) the static Result (Stage
// StageStatic) stands; otherwise the same Tokens go to ClassifyTokens (Stage
// StageEncoder), usually through the batcher. Classify(texts) stays the
// MiniLM-only path. A request pipeline on a cache miss:
//
//	tok, err := c.Tokenize(text)            // 400 → ErrEmptyText, ErrInvalidUTF8
//	r, err := c.StaticScore(tok)            // ErrNoStatic: no static stage, go to the encoder
//	if band, ok := c.Band(); ok && band.Decides(r.PSlow) {
//		return r                            // r.Stage == classifier.StageStatic
//	}
//	// else: the batcher's func calls c.ClassifyTokens(ctx, toks) (or
//	// c.Classify(ctx, texts): same results, tokenizing again)
//
// Version is content-derived (classifier.Manifest.ContentVersion over the
// tokenizer, encoder, head, static table and head as read), so any change to
// the model changes every cache key.
//
// # Batching
//
// Classify takes many texts. It tokenizes them, sorts them by token count
// and splits them into encoder calls whose padding stays within
// Config.MaxPadWaste of their real tokens (a 300-token summary never pads
// twenty 15-token questions), then runs the head once. Time-window batching
// across requests is the batcher package's job; this package only makes one
// call's worth of texts cheap.
//
// The int8 encoder (models/int8) quantises activations per batch tensor, so
// its output for a text depends on the texts batched with it (measured in the
// notebook: up to 0.11 in P(slow)); that is why fp32 is the default.
//
// # Concurrency
//
// A Classifier is safe for concurrent use: every method may be called from
// any number of goroutines. The tokenizer and both DynamicAdvancedSessions
// are shared; every encoder call allocates and destroys its own tensors.
// The static table and head are immutable after New; every call takes a
// read lock, only to exclude Close. Tokens values are immutable and may be
// passed between goroutines, and stay valid for any classifier with the
// same tokenizer and truncation (a reload that changes only heads, table or
// band), which ClassifyTokens and StaticScore check (ErrForeignTokens).
// Close takes the write lock, so it waits for running calls (the tokenizer's
// Close is not safe concurrently with an encode) and later calls get
// ErrClosed.
//
// # Lifecycle
//
// New loads and checks everything (missing files, sha256 mismatches, wrong
// ONNX Runtime version, unexpected tensor names or shapes fail with an error
// naming the file); a failed New frees what it had made. Close frees the
// sessions and the tokenizer and is idempotent. The ONNX Runtime environment
// is process-wide: the first New creates it and DestroyRuntime frees it at
// exit, after every Classifier is closed, so a hot reload (a new Classifier,
// then Close of the old one) keeps it.
package onnx
