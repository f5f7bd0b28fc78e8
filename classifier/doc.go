// Package classifier turns request text into P(slow): the HF tokenizer
// (daulet/tokenizers), the all-MiniLM-L6-v2 encoder on ONNX Runtime
// (yalue/onnxruntime_go), mean pooling with the attention mask and L2
// normalisation in Go, then the logistic-regression head exported by
// train/classifier.ipynb, also run on ONNX Runtime.
//
// The model is described by models/manifest.json (written by the notebook):
// encoder file and sha256, tokenizer sha256, output name, dimension,
// truncation (256 word pieces, right side), pooling, and the head's input
// features ("mean_pooled_l2", then "has_context": 1 when the tokens hold the
// instruction/context [SEP]). Go reproduces the notebook's P(slow) to 1e-4
// on every text of models/parity.jsonl (TestParity), and the static stage's
// to 1e-5 (TestStaticParity).
//
// # Two stages
//
// A static first stage decides most texts in microseconds; MiniLM decides
// the rest. Tokenize turns a text into Tokens once; StaticScore maps them to
// P(slow) with a table of one vector per word piece, distilled by the
// notebook from the same encoder (the mean of the pieces' rows, [CLS] and
// [SEP] left out, L2-normalised, then the static head with has_context); no
// ONNX Runtime call. When Band().Decides(p) the static Result (Stage
// StageStatic) stands; otherwise the same Tokens go to ClassifyTokens (Stage
// StageEncoder), usually through the batcher. Classify(texts) stays the
// MiniLM-only path. A request pipeline on a cache miss:
//
//	tok, err := c.Tokenize(text)            // 400 → ErrEmptyText, ErrInvalidUTF8
//	r, err := c.StaticScore(tok)            // ErrNoStatic: no static stage, go to the encoder
//	if band, ok := c.Band(); ok && band.Decides(r.PSlow) {
//		return r                            // r.Stage == StageStatic
//	}
//	// else: the batcher's func calls c.ClassifyTokens(ctx, toks) (or
//	// c.Classify(ctx, texts): same results, tokenizing again)
//
// The band is the manifest's (chosen on validation rows by the notebook);
// a caller may apply another Band, but Version covers only the manifest's,
// so a cache shared across configurations must key on the band it used.
// Version is content-derived: the manifest's version plus a hash of the
// manifest and every artifact loaded, so any change to the model (head,
// encoder, static table or head, band) changes every cache key.
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
// The static table and head are immutable after New and read without
// locking beyond the read lock every call takes; StaticScore allocates one
// dim-sized scratch vector per call. Tokens values are immutable and may be
// passed between goroutines, and stay valid for any classifier with the
// same tokenizer and truncation (a reload that changes only heads, table or
// band), which ClassifyTokens and StaticScore check (ErrForeignTokens).
// Close takes the write lock, so it waits for running calls and later calls
// get ErrClosed.
//
// # Lifecycle
//
// New loads and checks everything (missing files, sha256 mismatches, wrong
// ONNX Runtime version, unexpected tensor names or shapes fail with an error
// naming the file). The ONNX Runtime environment is process-wide: the first
// New creates it and DestroyRuntime frees it at exit, so a hot reload (a new
// Classifier, then Close of the old one) keeps it.
package classifier
