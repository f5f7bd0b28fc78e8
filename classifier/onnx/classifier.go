package onnx

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/daulet/tokenizers"
	ort "github.com/yalue/onnxruntime_go"

	"github.com/triage-gw/triage/classifier"
)

// Classifier turns texts into P(slow). It is safe for concurrent use: the
// tokenizer and both ONNX sessions are shared read-only, the static table is
// immutable; Close waits for running calls to finish.
type Classifier struct {
	manifest *classifier.Manifest
	cfg      classifier.Config
	tok      *tokenizers.Tokenizer
	words    *classifier.WordCache // nil when the tokenizer is not one it can reproduce
	encoder  *ort.DynamicAdvancedSession
	head     *ort.DynamicAdvancedSession
	static   *classifier.Static // nil when the manifest has no static stage
	sepID    uint32
	featDim  int
	hasCtx   bool
	version  string // content-derived, see Manifest.ContentVersion
	// tokID names the tokenizer and truncation that made a Tokens value:
	// ids are interchangeable between classifiers with equal tokID.
	tokID string
	// shas collects the artifacts' sha256s during load, for version.
	shas []string

	mu     sync.RWMutex // held for reading by Classify, for writing by Close
	closed bool
}

// New loads the manifest from cfg.ModelDir, then the tokenizer and encoder
// from cfg.EncoderDir and the head, checking files and tensor shapes. Every
// failure names the file and what was wrong.
func New(cfg classifier.Config) (*Classifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := classifier.LoadManifest(cfg.ModelDir)
	if err != nil {
		return nil, err
	}
	if err := initRuntime(cfg.ORTLibrary); err != nil {
		return nil, err
	}
	c := &Classifier{manifest: m, cfg: cfg, featDim: m.FeatureDim(), hasCtx: slices.Contains(m.Head.Features, classifier.FeatureHasContext)}
	ok := false
	defer func() {
		if !ok {
			c.free()
		}
	}()
	if err := c.loadTokenizer(); err != nil {
		return nil, err
	}
	if err := c.loadEncoder(); err != nil {
		return nil, err
	}
	if err := c.loadHead(); err != nil {
		return nil, err
	}
	if m.Static != nil {
		s, shas, err := classifier.LoadStatic(cfg.ModelDir, m)
		if err != nil {
			return nil, err
		}
		if s.Vocab() != int(c.tok.VocabSize()) {
			return nil, fmt.Errorf("static table: %d rows, the tokenizer has %d word pieces", s.Vocab(), c.tok.VocabSize())
		}
		c.static = s
		c.shas = append(c.shas, shas...)
	}
	c.version = m.ContentVersion(c.shas)
	c.shas = nil
	ok = true
	return c, nil
}

func (c *Classifier) loadTokenizer() error {
	m := c.manifest
	path := filepath.Join(c.cfg.EncoderDir, m.Encoder.TokenizerFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("tokenizer: %w (run scripts/setup.sh encoders)", err)
	}
	tokSHA := sha256Hex(raw)
	if c.cfg.VerifyEncoder && tokSHA != m.Encoder.TokenizerSHA256 {
		return fmt.Errorf("tokenizer %s: sha256 %s does not match the manifest's %s", path, tokSHA, m.Encoder.TokenizerSHA256)
	}
	c.shas = append(c.shas, tokSHA)
	c.tokID = fmt.Sprintf("%s/%d", tokSHA, m.Encoder.MaxTokens)
	// The packaged tokenizer.json pads to 128 and truncates at 128; the model
	// was trained with no padding and truncation at max_tokens (set below),
	// exactly as the notebook configures the Python tokenizer.
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("tokenizer %s: invalid JSON: %w", path, err)
	}
	doc["padding"] = json.RawMessage("null")
	doc["truncation"] = json.RawMessage("null")
	raw, err = json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("tokenizer %s: %w", path, err)
	}
	tok, err := tokenizers.FromBytesWithTruncation(raw, uint32(m.Encoder.MaxTokens), tokenizers.TruncationDirectionRight)
	if err != nil {
		return fmt.Errorf("tokenizer %s: %w", path, err)
	}
	c.tok = tok
	c.words = wordCacheFor(tokSHA, raw)
	ids, _ := tok.Encode("[SEP]", false)
	if len(ids) != 1 {
		return fmt.Errorf("tokenizer %s: no [SEP] special token", path)
	}
	c.sepID = ids[0]
	return nil
}

func (c *Classifier) sessionOptions() (*ort.SessionOptions, error) {
	opts, err := ort.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	if err := opts.SetIntraOpNumThreads(c.cfg.IntraOpThreads); err != nil {
		opts.Destroy()
		return nil, err
	}
	if err := opts.SetInterOpNumThreads(c.cfg.InterOpThreads); err != nil {
		opts.Destroy()
		return nil, err
	}
	spin := "0"
	if c.cfg.Spinning {
		spin = "1"
	}
	for _, k := range []string{"session.intra_op.allow_spinning", "session.inter_op.allow_spinning"} {
		if err := opts.AddSessionConfigEntry(k, spin); err != nil {
			opts.Destroy()
			return nil, fmt.Errorf("%s: %w", k, err)
		}
	}
	return opts, nil
}

func (c *Classifier) loadEncoder() error {
	m := c.manifest
	path := filepath.Join(c.cfg.EncoderDir, m.Encoder.File)
	// Hashed even when not verified: the content version must name the
	// encoder actually loaded.
	got, err := sha256File(path)
	if err != nil {
		return fmt.Errorf("encoder: %w (run scripts/setup.sh encoders)", err)
	}
	if c.cfg.VerifyEncoder && got != m.Encoder.SHA256 {
		return fmt.Errorf("encoder %s: sha256 %s does not match the manifest's %s (wrong or corrupt file)", path, got, m.Encoder.SHA256)
	}
	c.shas = append(c.shas, got)
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return fmt.Errorf("encoder %s: %w", path, err)
	}
	for _, want := range []string{"input_ids", "attention_mask", "token_type_ids"} {
		i := slices.IndexFunc(ins, func(x ort.InputOutputInfo) bool { return x.Name == want })
		if i < 0 {
			return fmt.Errorf("encoder %s: no input %q (inputs: %v)", path, want, ins)
		}
		if ins[i].DataType != ort.TensorElementDataTypeInt64 || len(ins[i].Dimensions) != 2 {
			return fmt.Errorf("encoder %s: input %s is %s, want int64 [batch, seq]", path, want, ins[i].String())
		}
	}
	o := slices.IndexFunc(outs, func(x ort.InputOutputInfo) bool { return x.Name == m.Encoder.Output })
	if o < 0 {
		return fmt.Errorf("encoder %s: no output %q (outputs: %v)", path, m.Encoder.Output, outs)
	}
	d := outs[o].Dimensions
	if outs[o].DataType != ort.TensorElementDataTypeFloat || len(d) != 3 || d[2] != int64(m.Encoder.Dim) {
		return fmt.Errorf("encoder %s: output %s, want float [batch, seq, %d]", path, outs[o].String(), m.Encoder.Dim)
	}
	opts, err := c.sessionOptions()
	if err != nil {
		return fmt.Errorf("encoder session options: %w", err)
	}
	defer opts.Destroy()
	c.encoder, err = ort.NewDynamicAdvancedSession(path, []string{"input_ids", "attention_mask", "token_type_ids"},
		[]string{m.Encoder.Output}, opts)
	if err != nil {
		return fmt.Errorf("encoder %s: %w", path, err)
	}
	return nil
}

func (c *Classifier) loadHead() error {
	m := c.manifest
	path := filepath.Join(c.cfg.ModelDir, m.Head.File)
	got, err := sha256File(path)
	if err != nil {
		return fmt.Errorf("head: %w", err)
	}
	if got != m.Head.SHA256 {
		return fmt.Errorf("head %s: sha256 %s does not match the manifest's %s", path, got, m.Head.SHA256)
	}
	c.shas = append(c.shas, got)
	ins, outs, err := ort.GetInputOutputInfo(path)
	if err != nil {
		return fmt.Errorf("head %s: %w", path, err)
	}
	if len(ins) != 1 || ins[0].Name != m.Head.Input || len(ins[0].Dimensions) != 2 ||
		ins[0].Dimensions[1] != int64(c.featDim) || ins[0].DataType != ort.TensorElementDataTypeFloat {
		return fmt.Errorf("head %s: inputs %v, want one float [batch, %d] named %q", path, ins, c.featDim, m.Head.Input)
	}
	if len(outs) != 1 || outs[0].Name != m.Head.Output || len(outs[0].Dimensions) != 1 {
		return fmt.Errorf("head %s: outputs %v, want one float [batch] named %q", path, outs, m.Head.Output)
	}
	opts, err := c.sessionOptions()
	if err != nil {
		return fmt.Errorf("head session options: %w", err)
	}
	defer opts.Destroy()
	c.head, err = ort.NewDynamicAdvancedSession(path, []string{m.Head.Input}, []string{m.Head.Output}, opts)
	if err != nil {
		return fmt.Errorf("head %s: %w", path, err)
	}
	return nil
}

// Version names the loaded model by content: the manifest's version, "+",
// then 12 hex digits of a sha256 over manifest.json and every artifact as
// read (tokenizer, encoder, head, static table and head; the band is in the
// manifest). Any change to any of them changes it, so it can key cached
// results. Two classifiers loaded from identical files have equal versions.
func (c *Classifier) Version() string { return c.version }

// LabelThreshold returns the manifest's label_threshold: the model labels a
// text slow iff P(slow) is above it. It is the only source of that boundary;
// everything that turns a P(slow) into a label reads it from here.
func (c *Classifier) LabelThreshold() float64 { return c.manifest.LabelThreshold }

// Manifest returns the loaded manifest (read-only).
func (c *Classifier) Manifest() *classifier.Manifest { return c.manifest }

// Classify returns one Result per text, in order. Texts longer than the
// encoder's max_tokens word pieces are truncated on the right, as in
// training. Texts are grouped by token count so a long text does not pad
// a batch of short ones; each group is one encoder call, and the head runs
// once for the whole call.
func (c *Classifier) Classify(ctx context.Context, texts []string) ([]classifier.Result, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.closed {
		return nil, classifier.ErrClosed
	}
	if len(texts) == 0 {
		return nil, nil
	}
	ids := make([][]uint32, len(texts))
	for i, t := range texts {
		var err error
		if ids[i], err = c.encode(t); err != nil {
			return nil, &classifier.TextError{Index: i, Err: err}
		}
	}
	return c.classifyIDs(ctx, ids)
}

// encode validates and tokenizes one text. The caller holds c.mu.
func (c *Classifier) encode(t string) ([]uint32, error) {
	if !utf8.ValidString(t) {
		return nil, classifier.ErrInvalidUTF8
	}
	// C strings end at NUL; BERT's normaliser drops NUL anyway, so
	// removing it keeps Go and Python identical.
	t = strings.ReplaceAll(t, "\x00", "")
	if strings.TrimSpace(t) == "" {
		return nil, classifier.ErrEmptyText
	}
	if c.words != nil {
		if ids, ok := c.encodeWords(t); ok {
			return ids, nil
		}
		c.words.NoteWhole()
	}
	ids, _, _, err := c.tokenize(t, false)
	return ids, err
}

// lastWords is the word cache of the tokenizer loaded last, by its sha256: a reload that
// keeps the tokenizer (a new head, band or manifest) keeps the words learnt, so the first
// requests after it are not all cache misses of the tokenizer too. One at a time: a reload
// to another tokenizer drops the old one's words with the old classifier.
var lastWords struct {
	sync.Mutex
	sha string
	w   *classifier.WordCache
}

// wordCacheFor returns the word cache for the tokenizer whose tokenizer.json is raw
// (sha256 sha): the last one made when it is the same tokenizer, else a new one; nil when
// the tokenizer is not one the word cache can reproduce.
func wordCacheFor(sha string, raw []byte) *classifier.WordCache {
	lastWords.Lock()
	defer lastWords.Unlock()
	if lastWords.w != nil && lastWords.sha == sha {
		return lastWords.w
	}
	w, err := classifier.NewWordCache(raw)
	if err != nil {
		return nil
	}
	lastWords.sha, lastWords.w = sha, w
	return w
}

// WordCacheStats is what the tokenizer's word cache has done since it was made (a reload
// that keeps the tokenizer keeps it and its counts), and false when the tokenizer is not
// one it can reproduce.
func (c *Classifier) WordCacheStats() (classifier.WordCacheStats, bool) {
	if c.words == nil {
		return classifier.WordCacheStats{}, false
	}
	return c.words.Stats(), true
}

// encodeWords tokenizes t through the word cache: the cache splits new words of printable
// ASCII itself; the other words it lacks are tokenized together, one call of the HF
// tokenizer for all of them, and learnt; then t is read from the cache. A text with a word the cache does not keep is the tokenizer's (false), and so
// is one still not read after a few rounds (a long text of new words, learnt a part at a
// time, or a cache that started again between learning and reading).
func (c *Classifier) encodeWords(t string) ([]uint32, bool) {
	maxTok := c.manifest.Encoder.MaxTokens
	var missing []string
	for range 4 {
		ids, miss, ok := c.words.Encode(t, maxTok, missing)
		if ok {
			return ids, true
		}
		if len(miss) == 0 {
			return nil, false
		}
		// A space joins them: BERT tokenizes each word alone, so together they give
		// each its own pieces, and the offsets say which are whose.
		joined := strings.Join(miss, " ")
		wi, head, wo, err := c.tokenize(joined, true)
		if err != nil {
			return nil, false
		}
		c.words.Learn(head, wi, wo, maxTok)
		missing = miss
	}
	return nil, false
}

// tokenize is the HF tokenizer's answer for t (valid UTF-8 without NUL bytes), the prefix
// of t it read and, when asked, each id's byte offsets in it (for the word cache).
//
// The tokenizer reads the whole text before it truncates, at about 2 MB/s on this
// project's VMs (34 ms for 64 KiB), though the encoder keeps only its first max_tokens
// ids. So a long text is tokenized a prefix at a time, cut at ASCII whitespace: BERT's
// normaliser and pre-tokenizer act on one character at a time and split words at
// whitespace, so a prefix cut there gives the whole text's first ids. Once a prefix fills
// max_tokens, those are the whole text's ids after truncation; a prefix that does not is
// grown four-fold. TestPrefixTokenizingIsExact holds it to the whole text.
func (c *Classifier) tokenize(t string, withOffsets bool) ([]uint32, string, [][2]uint, error) {
	var opts []tokenizers.EncodeOption
	if withOffsets {
		opts = append(opts, tokenizers.WithReturnOffsets())
	}
	limit := prefixBytesPerToken * c.manifest.Encoder.MaxTokens
	for {
		head, cut := cutAtSpace(t, limit)
		// EncodeWithOptions with no options returns the ids alone (Encode
		// also copies every token's string). v1.22 has no ...Err variant: an
		// empty result is its failure signal, checked here.
		enc := c.tok.EncodeWithOptions(head, true, opts...)
		if len(enc.IDs) == 0 {
			return nil, "", nil, errors.New("tokenizer produced no tokens")
		}
		if !cut || len(enc.IDs) >= c.manifest.Encoder.MaxTokens {
			var offs [][2]uint
			if withOffsets {
				offs = make([][2]uint, len(enc.Offsets))
				for i, o := range enc.Offsets {
					offs[i] = o
				}
			}
			return enc.IDs, head, offs, nil
		}
		limit *= 4
	}
}

// prefixBytesPerToken sizes the first prefix encode tokenizes: max_tokens word
// pieces of English prose take 4–5 bytes each, so 8 bytes a piece fills them
// on the first try for nearly every text (2 KiB for 256 pieces).
const prefixBytesPerToken = 8

// cutAtSpace returns t up to its first ASCII whitespace at or after byte limit,
// and whether that cut anything. A text shorter than limit, or without such a
// space after it, is returned whole. ASCII bytes never occur inside a
// multi-byte UTF-8 sequence, so the cut is on a rune boundary.
func cutAtSpace(t string, limit int) (string, bool) {
	if len(t) <= limit {
		return t, false
	}
	i := strings.IndexAny(t[limit:], " \t\n\r")
	if i < 0 {
		return t, false
	}
	return t[:limit+i], true
}

// classifyIDs runs the encoder and head on tokenized texts. The caller
// holds c.mu.
func (c *Classifier) classifyIDs(ctx context.Context, ids [][]uint32) ([]classifier.Result, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	lens := make([]int, len(ids))
	order := make([]int, len(ids))
	for i := range ids {
		lens[i], order[i] = len(ids[i]), i
	}
	slices.SortStableFunc(order, func(a, b int) int { return lens[a] - lens[b] })

	dim := c.manifest.Encoder.Dim
	feats := make([]float32, len(ids)*c.featDim)
	for _, g := range groupByLength(order, lens, c.cfg.MaxPadWaste, c.cfg.MaxGroupTokens) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := c.encodeGroup(g, ids, feats, dim); err != nil {
			return nil, err
		}
	}
	p, err := c.runHead(feats, len(ids))
	if err != nil {
		return nil, err
	}
	out := make([]classifier.Result, len(ids))
	for i := range out {
		out[i] = classifier.Result{PSlow: p[i], Tokens: lens[i]}
		if float64(p[i]) > c.manifest.LabelThreshold {
			out[i].Label = classifier.SlowLabel
		}
	}
	return out, nil
}

// encodeGroup runs the encoder on one length group and writes each text's
// features into feats.
func (c *Classifier) encodeGroup(g group, ids [][]uint32, feats []float32, dim int) error {
	n, L := len(g.idx), g.maxLen
	inputIDs := make([]int64, n*L)
	mask := make([]int64, n*L)
	for r, k := range g.idx {
		for t, id := range ids[k] {
			inputIDs[r*L+t] = int64(id)
			mask[r*L+t] = 1
		}
	}
	shape := ort.NewShape(int64(n), int64(L))
	tIDs, err := ort.NewTensor(shape, inputIDs)
	if err != nil {
		return fmt.Errorf("encoder input: %w", err)
	}
	defer tIDs.Destroy()
	tMask, err := ort.NewTensor(shape, mask)
	if err != nil {
		return fmt.Errorf("encoder input: %w", err)
	}
	defer tMask.Destroy()
	tTypes, err := ort.NewEmptyTensor[int64](shape) // zeros: single-segment input
	if err != nil {
		return fmt.Errorf("encoder input: %w", err)
	}
	defer tTypes.Destroy()
	hidden, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(n), int64(L), int64(dim)))
	if err != nil {
		return fmt.Errorf("encoder output: %w", err)
	}
	defer hidden.Destroy()
	if err := c.encoder.Run([]ort.Value{tIDs, tMask, tTypes}, []ort.Value{hidden}); err != nil {
		return fmt.Errorf("encoder run (batch %d × %d tokens): %w", n, L, err)
	}
	h := hidden.GetData()
	for r, k := range g.idx {
		f := feats[k*c.featDim : (k+1)*c.featDim]
		meanPoolL2(f[:dim], h[r*L*dim:(r+1)*L*dim], len(ids[k]), dim)
		if c.hasCtx {
			f[dim] = classifier.HasContext(ids[k], c.sepID)
		}
	}
	return nil
}

func (c *Classifier) runHead(feats []float32, n int) ([]float32, error) {
	in, err := ort.NewTensor(ort.NewShape(int64(n), int64(c.featDim)), feats)
	if err != nil {
		return nil, fmt.Errorf("head input: %w", err)
	}
	defer in.Destroy()
	out, err := ort.NewEmptyTensor[float32](ort.NewShape(int64(n)))
	if err != nil {
		return nil, fmt.Errorf("head output: %w", err)
	}
	defer out.Destroy()
	if err := c.head.Run([]ort.Value{in}, []ort.Value{out}); err != nil {
		return nil, fmt.Errorf("head run: %w", err)
	}
	return slices.Clone(out.GetData()), nil
}

// Close waits for running Classify calls, then frees the sessions and the
// tokenizer. Later calls get ErrClosed. Close is idempotent.
func (c *Classifier) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	return c.free()
}

func (c *Classifier) free() error {
	var errs []error
	if c.encoder != nil {
		errs = append(errs, c.encoder.Destroy())
		c.encoder = nil
	}
	if c.head != nil {
		errs = append(errs, c.head.Destroy())
		c.head = nil
	}
	if c.tok != nil {
		errs = append(errs, c.tok.Close())
		c.tok = nil
	}
	return errors.Join(errs...)
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func sha256File(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
