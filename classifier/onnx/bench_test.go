package onnx

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/triage-gw/triage/classifier"
)

// dollyTexts returns n texts of the four target categories in the model's
// input format, drawn with a fixed seed from the shared Dolly file.
func dollyTexts(b testing.TB, n int) []string {
	b.Helper()
	path := os.Getenv("TRIAGE_DOLLY")
	if path == "" {
		path = filepath.Join(repo, "../shared/datasets/dolly-15k-dev.jsonl")
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatalf("dolly data: %v", err)
	}
	defer f.Close()
	var all []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var r struct{ Instruction, Context, Category string }
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			b.Fatal(err)
		}
		switch r.Category {
		case "classification", "summarization", "creative_writing", "general_qa":
			all = append(all, classifier.FormatInput(r.Instruction, r.Context))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
	return all[:n]
}

// BenchmarkClassify measures the classifier alone on Dolly texts: texts/s
// and real tokens/s at batch sizes 1, 8 and 32, with length grouping (the
// default) and without (one call padded to the longest text), fp32 and
// int8. "uniform32" feeds batches of 32 texts of 28–36 tokens: the encoder's
// best shape, no padding waste, which bounds what the gateway can reach.
//
//	make bench-classifier   (or: go test -run '^$' -bench Classify ./classifier/onnx/)
func BenchmarkClassify(b *testing.B) {
	texts := dollyTexts(b, 2048)
	for _, variant := range []string{"fp32", "int8"} {
		dir := ""
		if variant == "int8" {
			dir = "int8"
		}
		for _, grouped := range []bool{true, false} {
			cfg := testConfig(b, dir)
			if !grouped {
				cfg.MaxPadWaste, cfg.MaxGroupTokens = 100, 1<<30 // 100× waste never splits 32 texts of ≤256 tokens
			}
			c, err := New(cfg)
			if err != nil {
				b.Fatal(err)
			}
			for _, bs := range []int{1, 8, 32} {
				name := fmt.Sprintf("%s/batch=%d/grouped=%v", variant, bs, grouped)
				if bs == 1 && !grouped {
					continue // identical to grouped at batch 1
				}
				b.Run(name, func(b *testing.B) { runClassifyBench(b, c, texts, bs) })
			}
			if grouped {
				uni := uniformTexts(b, c, texts, 28, 36)
				b.Run(variant+"/uniform32", func(b *testing.B) { runClassifyBench(b, c, uni, 32) })
			}
			c.Close()
		}
	}
}

func uniformTexts(b *testing.B, c *Classifier, texts []string, lo, hi int) []string {
	var out []string
	for _, t := range texts {
		r, err := c.Classify(context.Background(), []string{t})
		if err != nil {
			b.Fatal(err)
		}
		if r[0].Tokens >= lo && r[0].Tokens <= hi {
			out = append(out, t)
		}
	}
	if len(out) < 32 {
		b.Fatalf("only %d texts of %d–%d tokens", len(out), lo, hi)
	}
	return out
}

func runClassifyBench(b *testing.B, c *Classifier, texts []string, bs int) {
	ctx := context.Background()
	var nTexts, nTokens int
	pos := 0
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if pos+bs > len(texts) {
			pos = 0
		}
		res, err := c.Classify(ctx, texts[pos:pos+bs])
		if err != nil {
			b.Fatal(err)
		}
		pos += bs
		nTexts += len(res)
		for _, r := range res {
			nTokens += r.Tokens
		}
	}
	sec := b.Elapsed().Seconds()
	b.ReportMetric(float64(nTexts)/sec, "texts/s")
	b.ReportMetric(float64(nTokens)/sec, "tokens/s")
	b.ReportMetric(float64(nTokens)/float64(nTexts), "tokens/text")
}

// BenchmarkSpinning compares ONNX Runtime's busy-waiting intra-op threads
// (classifier.Config.Spinning) with the default (off) at batch 1 and on the best shape.
func BenchmarkSpinning(b *testing.B) {
	texts := dollyTexts(b, 2048)
	for _, spin := range []bool{false, true} {
		cfg := testConfig(b, "")
		cfg.Spinning = spin
		c, err := New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		uni := uniformTexts(b, c, texts[:512], 28, 36)
		b.Run(fmt.Sprintf("spinning=%v/batch=1", spin), func(b *testing.B) { runClassifyBench(b, c, texts, 1) })
		b.Run(fmt.Sprintf("spinning=%v/uniform32", spin), func(b *testing.B) { runClassifyBench(b, c, uni, 32) })
		c.Close()
	}
}

// BenchmarkStatic measures the static first stage on Dolly texts, on long
// texts (256 word pieces after truncation) and on 16 KiB of joined Dolly rows
// (a long prompt as the gateway cuts it): texts/s and µs/text, with
// tokenization included ("tokenize+static": Tokenize then StaticScore, what
// a cache miss costs before the band decides) and excluded ("static":
// StaticScore on tokens made beforehand). "tokenize" is Tokenize alone, its
// words in the word cache; "tokenize-new-word" with one new word, split by the
// cache, and "tokenize-new-word-learnt" learnt from the tokenizer; "tokenize-uncached"
// the HF tokenizer alone.
//
//	go test -run '^$' -bench Static ./classifier/onnx/
func BenchmarkStatic(b *testing.B) {
	c := newTestClassifier(b, "")
	dolly := dollyTexts(b, 2048)
	var long []string
	for _, t := range dolly {
		if tk, err := c.Tokenize(t); err == nil && tk.Len() == c.Manifest().Encoder.MaxTokens {
			long = append(long, t)
		}
	}
	if len(long) < 32 {
		b.Fatalf("only %d texts of %d tokens", len(long), c.Manifest().Encoder.MaxTokens)
	}
	// The same long rows' contexts as prompts of their own: no context, long, so a model
	// with a long head scores them on it (the other sets are the static head's).
	noCtx := make([]string, 0, len(long))
	for _, t := range long {
		if _, ctx, ok := strings.Cut(t, classifier.Separator); ok {
			noCtx = append(noCtx, classifier.FormatInput(ctx, ""))
		}
	}
	// A long prompt as the gateway hands it over: Dolly rows joined to server.max_text_bytes'
	// default, 16 KiB (before prefix tokenizing, the tokenizer read all of it).
	var joined []string
	for i := 0; len(joined) < 64; i++ {
		var sb strings.Builder
		for j := i; sb.Len() < 16<<10; j++ {
			sb.WriteString(dolly[j%len(dolly)])
			sb.WriteString(" ")
		}
		joined = append(joined, sb.String()[:16<<10-64])
	}
	for _, set := range []struct {
		name  string
		texts []string
	}{{"dolly", dolly}, {"tokens=256", long}, {"no-context", noCtx}, {"16KiB", joined}} {
		toks := make([]classifier.Tokens, len(set.texts))
		nTok := 0
		for i, t := range set.texts {
			var err error
			if toks[i], err = c.Tokenize(t); err != nil {
				b.Fatal(err)
			}
			nTok += toks[i].Len()
		}
		report := func(b *testing.B) {
			sec := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/sec, "texts/s")
			b.ReportMetric(sec*1e6/float64(b.N), "µs/text")
			b.ReportMetric(float64(nTok)/float64(len(toks)), "tokens/text")
		}
		b.Run(set.name+"/tokenize+static", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				tk, err := c.Tokenize(set.texts[i%len(set.texts)])
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.StaticScore(tk); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/static", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := c.StaticScore(toks[i%len(toks)]); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/in-band-head", func(b *testing.B) {
			// What a text inside the band costs on top of /static when load or a failed
			// encoder has the first stage decide it.
			for i := 0; i < b.N; i++ {
				if _, err := c.InBandScore(toks[i%len(toks)]); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/tokenize", func(b *testing.B) {
			// Every text was tokenized above, so its words are in the word cache:
			// what a text of known words costs.
			for i := 0; i < b.N; i++ {
				if _, err := c.Tokenize(set.texts[i%len(set.texts)]); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/tokenize-new-word", func(b *testing.B) {
			// Known words but one never seen (a number, a name): the word cache splits
			// it itself (printable ASCII).
			for i := 0; i < b.N; i++ {
				if _, err := c.Tokenize("n" + strconv.Itoa(i) + " " + set.texts[i%len(set.texts)]); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/tokenize-new-word-learnt", func(b *testing.B) {
			// The same, the word learnt from the tokenizer: a word the cache does not
			// split (one of non-ASCII letters), or a cache that only learns.
			w := c.words
			c.words = mustWordCache(b, c)
			c.words.LearnOnly()
			defer func() { c.words = w }()
			for _, t := range set.texts {
				_, _ = c.Tokenize(t)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Tokenize("n" + strconv.Itoa(i) + " " + set.texts[i%len(set.texts)]); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/tokenize-uncached", func(b *testing.B) {
			// The HF tokenizer alone: what a text with a word the cache has not seen
			// costs (and the word cache's learning on top, in encode).
			for i := 0; i < b.N; i++ {
				if _, _, _, err := c.tokenize(set.texts[i%len(set.texts)], false); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
		b.Run(set.name+"/encoder-batch1", func(b *testing.B) {
			// The encoder path the static stage saves, one text per call,
			// in the same run for a ratio.
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if _, err := c.ClassifyTokens(ctx, toks[i%len(toks):i%len(toks)+1]); err != nil {
					b.Fatal(err)
				}
			}
			report(b)
		})
	}
}
