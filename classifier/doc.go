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
// on every text of models/parity.jsonl (TestParity).
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
// A Classifier is safe for concurrent use. The tokenizer and both
// DynamicAdvancedSessions are shared; every call allocates and destroys its
// own tensors. Close takes the write lock, so it waits for running calls and
// later calls get ErrClosed.
//
// # Lifecycle
//
// New loads and checks everything (missing files, sha256 mismatches, wrong
// ONNX Runtime version, unexpected tensor names or shapes fail with an error
// naming the file). The ONNX Runtime environment is process-wide: the first
// New creates it and DestroyRuntime frees it at exit, so a hot reload (a new
// Classifier, then Close of the old one) keeps it.
package classifier
