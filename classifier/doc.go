// Package classifier is what the gateway knows of its request classifier
// without linking the model runtime: the types a model answers with
// (Result, Stage, Tokens, Band, the input errors and *TextError), the input
// format (FormatInput; the noise filter FilterNoise, FilterInput), the configuration (Config: validation and CheckFiles),
// the model description (Manifest, LoadManifest, its content version) and the
// static first stage (Static: a table of one vector per word piece and its
// head, pure Go). It is pure Go and builds with CGO_ENABLED=0, so the router,
// the HTTP layer and config depend on it freely.
//
// The model itself, the HF tokenizer (daulet/tokenizers) and the
// all-MiniLM-L6-v2 encoder and head on ONNX Runtime (yalue/onnxruntime_go),
// is package classifier/onnx: the only package that links them, wired in by
// cmd/triage alone (docs/architecture.md; internal/archtest checks it over
// the transitive import graph).
//
// The model is described by models/manifest.json (written by
// train/classifier.ipynb): encoder file and sha256, tokenizer sha256, output
// name, dimension, truncation (256 word pieces, right side), pooling, and the
// head's input features (FeatureMeanPooled, then FeatureHasContext: 1 when
// the tokens hold the instruction/context [SEP]). LoadManifest refuses a
// manifest the Go side cannot reproduce, naming the field.
//
// # The static first stage
//
// Static maps a text's word-piece ids to P(slow) in microseconds: the mean
// of the pieces' rows in a table distilled by the notebook from the same
// encoder ([CLS] and [SEP] left out), L2-normalised, then the static head
// with has_context. The table may be int8 with a scale per row, float16 or
// float32 (manifest static.table_format); float16 and float32 are widened to
// float32 at load, int8 is used in place. When Band.Decides(p) the static
// result stands; otherwise the model's encoder decides, from the same Tokens.
// The band is the manifest's (chosen on validation rows by the notebook); a
// caller may apply another Band, but a model's version covers only the
// manifest's, so a cache shared across configurations must key on the band
// it used.
//
// # Versions
//
// Manifest.ContentVersion names a loaded model by content: the manifest's
// version plus a hash of manifest.json and every artifact as read, so any
// change to the model (head, encoder, static table or head, band) changes
// every cache key.
//
// # Concurrency
//
// Everything here is immutable once made: a Manifest after LoadManifest, a
// Static after LoadStatic (Score allocates its own dim-sized scratch vector
// per call), Tokens after NewTokens. All may be shared between goroutines
// without locking. Tokens stay valid for any model with the same tokenizer
// and truncation (IDsFor checks it), so a reload that changes only heads,
// table or band keeps them usable.
//
// # Lifecycle
//
// Nothing here holds a resource beyond memory: a Static holds its table
// (about 11 MiB for the shipped int8 table) until it is garbage.
package classifier
