package server

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/router"
)

// words returns n words of prose.
func words(n int) string {
	w := strings.Fields("the river rises in the highlands and flows north through the desert to the sea")
	out := make([]string, n)
	for i := range out {
		out[i] = w[i%len(w)]
	}
	return strings.Join(out, " ")
}

func TestSplitPasted(t *testing.T) {
	doc := words(40) + ".\n\n" + words(30) + "."
	for _, c := range []struct {
		name, text, instruction, context string
	}{
		{"instruction first", "Summarize this article:\n\n" + doc, "Summarize this article:", doc},
		{"instruction last", doc + "\n\nWhat does it say about the sea?", "What does it say about the sea?", doc},
		{"both ends short: the shorter", "Summarize this.\n\n" + words(60) + "\n\nKeep it under fifty words, please.",
			"Summarize this.", words(60) + "\n\nKeep it under fifty words, please."},
		{"both ends short: a first ending with a colon", "Summarize this article:\n\n" + doc + "\n\nSource: Wikipedia.",
			"Summarize this article:", doc + "\n\nSource: Wikipedia."},
		{"the same on single newlines", "Summarize this article:\n" + words(40) + ".\nSource: Wikipedia.",
			"Summarize this article:", words(40) + ".\nSource: Wikipedia."},
		{"blank line of spaces, CRLF", "Summarize:\r\n \t\r\n" + words(40) + "\r\n", "Summarize:", words(40)},
		{"blank lines around the text", "\n\n  Summarize:\n\n\n" + words(40) + "\n\n", "Summarize:", words(40)},
		{"a single newline after a colon", "Summarize:\n" + words(40), "Summarize:", words(40)},
		{"a single newline, wrapped prose", "Summarize this article.\n" + strings.Repeat(words(12)+"\n", 4),
			"Summarize this article.", strings.TrimSpace(strings.Repeat(words(12)+"\n", 4))},
		{"a single newline, the question last", doc + "\nWhat does it say about the sea?", "What does it say about the sea?", doc},
		{"a single newline, closing quote", "Summarize \"this\":\n" + words(40), "Summarize \"this\":", words(40)},
		{"a single newline without a sentence end, a long line after", "summarize this\n" + words(40), "summarize this", words(40)},
		{"a single newline without a sentence end, wrapped text after", "Summarize this\n" + strings.Repeat(words(12)+"\n", 4), "", ""},
		{"a single newline, the request last without a sentence end", doc + "\nsummarize it", "summarize it", doc},
		{"a single newline after a citation", words(40) + ".[1][23]\nWhat is it about?", "What is it about?", words(40) + ".[1][23]"},
		{"a single newline after a long line without a sentence end", words(40) + "\nWhat is it about?", "What is it about?", words(40)},
		{"a single newline after a wrapped line without a sentence end", strings.Repeat(words(12)+"\n", 4) + "What is it about?", "", ""},
		{"a single newline before a list", "Which of these are rivers?\n" + strings.Repeat("Nile\n", 40), "", ""},
		{"a single newline before code", "Fix this:\n" + strings.Repeat("x := f(a, b)\n", 20), "", ""},
		{"a single newline before grep hits", "Why does this time out?\n" + strings.Repeat("net/dial.go:225: ctx, cancel := context.WithTimeout(ctx, d.Timeout) // the dial's deadline\n", 5), "", ""},
		{"a single newline, under 10 words a line", "Summarize:\n" + strings.Repeat(words(9)+"\n", 5), "", ""},
		{"the tail of a wrapped paragraph is not a request", strings.Repeat(words(12)+"\n", 4) + "to the sea.", "", ""},
		{"a line of 100 bytes may be wrapped text", strings.Repeat(words(12)+"\n", 3) + strings.Repeat("sea ", 24) + "seas\nWhat is it about?", "", ""},
		{"a line of 101 bytes is not", strings.Repeat(words(12)+"\n", 3) + strings.Repeat("sea ", 24) + "river\nWhat is it about?", "What is it about?", strings.Repeat(words(12)+"\n", 3) + strings.Repeat("sea ", 24) + "river"},
		{"a blank line before a single newline", "Summarize this.\n\n" + words(60) + "\nKeep it short.",
			"Summarize this.", words(60) + "\nKeep it short."},
		{"one paragraph", "Summarize: " + words(40), "", ""},
		{"two short paragraphs are one request", "I'm going to Japan in May.\n\nWhat should I see?", "", ""},
		{"rest under 32 words", "Summarize:\n\n" + words(31), "", ""},
		{"rest of 32 words", "Summarize:\n\n" + words(32), "Summarize:", words(32)},
		{"rest under twice the instruction", words(20) + "\n\n" + words(39), "", ""},
		{"rest twice the instruction", words(20) + "\n\n" + words(40), words(20), words(40)},
		{"instruction over 48 words", words(49) + "\n\n" + words(200), "", ""},
		{"code after a blank line is not a document", "Fix this bug:\n\n" + strings.Repeat("if err != nil { return fmt.Errorf(\"read %s: %w\", name, err) }\n", 6), "", ""},
		{"a stack trace after a blank line", "Why does this fail?\n\n" + strings.Repeat("main.(*Server).Serve(0xc000010000)\n\t/src/server.go:42 +0x1d\n", 8), "", ""},
		{"first too long, last qualifies", words(49) + "\n\n" + words(200) + "\n\nTranslate it.",
			"Translate it.", words(49) + "\n\n" + words(200)},
	} {
		t.Run(c.name, func(t *testing.T) {
			instruction, context, ok := splitPasted(c.text)
			require.Equal(t, c.instruction != "", ok)
			require.Equal(t, c.instruction, instruction)
			require.Equal(t, strings.ReplaceAll(c.context, "\r", ""), strings.ReplaceAll(context, "\r", ""))
		})
	}
}

// TestPastedDocumentIsTheContext: every routed API and /v1/classify classify a pasted
// document as the instruction's context, with server.split_pasted (the default); without it,
// or when the request names a context, the text is taken as it came. The request itself is
// not changed.
func TestPastedDocumentIsTheContext(t *testing.T) {
	doc := words(60)
	pasted := "Summarize this article:\n\n" + doc
	split := router.Input("Summarize this article:", doc)
	whole := router.Input(pasted, "")
	on := limits{maxTextBytes: 1 << 14, maxBatchTexts: 4, splitPasted: true}
	off := on
	off.splitPasted = false
	q := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "\n", `\n`), `"`, `\"`) }

	decoders := map[string]func([]byte, limits) (textInput, error){
		"chat": func(b []byte, l limits) (textInput, error) {
			p, err := decodeChat(b, l)
			return p.text, err
		},
		"messages": func(b []byte, l limits) (textInput, error) {
			p, err := decodeMessages(b, l, false)
			return p.text, err
		},
		"responses": func(b []byte, l limits) (textInput, error) {
			p, err := decodeResponses(b, l)
			return p.text, err
		},
		"completions": func(b []byte, l limits) (textInput, error) {
			p, err := decodeCompletion(b, l)
			return p.text, err
		},
		"classify": func(b []byte, l limits) (textInput, error) {
			in, err := decodeClassify(b, l)
			if err != nil {
				return textInput{}, err
			}
			return in[0], nil
		},
	}
	bodies := map[string]string{
		"chat":        `{"model":"auto","messages":[{"role":"user","content":"` + q(pasted) + `"}]}`,
		"messages":    `{"model":"auto","max_tokens":8,"messages":[{"role":"user","content":"` + q(pasted) + `"}]}`,
		"responses":   `{"model":"auto","input":"` + q(pasted) + `"}`,
		"completions": `{"model":"auto","prompt":"` + q(pasted) + `"}`,
		"classify":    `{"text":"` + q(pasted) + `"}`,
	}
	for name, decode := range decoders {
		in, err := decode([]byte(bodies[name]), on)
		require.NoError(t, err, name)
		require.Equal(t, split, in.input, name)
		require.True(t, in.pasted, name)
		require.Equal(t, pasted, in.instruction, "%s: the request's own text is kept", name)
		in, err = decode([]byte(bodies[name]), off)
		require.NoError(t, err, name)
		require.Equal(t, whole, in.input, "%s with split_pasted off", name)
		require.False(t, in.pasted, name)
	}

	// A context named by the request is the context; the text is not split again.
	in, err := decodeClassify([]byte(`{"text":"`+q(pasted)+`","context":"notes"}`), on)
	require.NoError(t, err)
	require.Equal(t, router.Input(pasted, "notes"), in[0].input)
	p, err := decodeChat([]byte(`{"model":"auto","messages":[{"role":"user","content":[{"type":"text","text":"Summarize this."},{"type":"text","text":"`+q(doc)+`"}]}]}`), on)
	require.NoError(t, err)
	require.Equal(t, router.Input("Summarize this.", doc), p.text.input, "content parts are split as before")
}

func FuzzSplitPasted(f *testing.F) {
	for _, s := range []string{"Summarize:\n\n" + words(40), words(40) + "\n\nWhy?", "a\n\nb", "\n \n", "x\r\n\r\ny",
		words(10) + "\n\n" + words(40) + "\n\n" + words(5), "\n\n\n", "", "Summarize:\n" + words(40),
		words(40) + ".\nWhy?", "a.\nb c d e f g h i j k\nl"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, text string) {
		instruction, context, ok := splitPasted(text)
		if !ok {
			require.Empty(t, instruction)
			require.Empty(t, context)
			return
		}
		require.NotEmpty(t, instruction)
		require.Equal(t, strings.TrimSpace(instruction), instruction)
		require.Equal(t, strings.TrimSpace(context), context)
		n, _, _ := countWords(instruction, 1<<30)
		require.LessOrEqual(t, n, pastedInstructionWords)
		nc, _, _ := countWords(context, 1<<30)
		require.GreaterOrEqual(t, nc, max(pastedContextWords, 2*n))
		require.True(t, strings.Contains(text, instruction) && strings.Contains(text, context))
		require.True(t, strings.HasPrefix(strings.TrimSpace(text), instruction) || strings.HasSuffix(strings.TrimSpace(text), instruction))
		if _, _, blank := splitEnds(strings.TrimSpace(text), true); !blank {
			// A single newline's split: the instruction is one line.
			require.NotContains(t, instruction, "\n")
		}
		nt, _, _ := countWords(text, 1<<30)
		require.Equal(t, nt, n+nc, "no word is lost")
	})
}

func BenchmarkSplitPasted(b *testing.B) {
	for _, c := range []struct{ name, text string }{
		{"instruction only", "Summarize the main points of the article for a busy reader"},
		{"pasted 16KiB", "Summarize this article:\n\n" + strings.Repeat(words(40)+".\n", 400)},
		{"pasted 16KiB, one newline", "Summarize this article:\n" + strings.Repeat(words(40)+".\n", 400)},
		{"no blank line 1MiB", strings.Repeat(words(20)+"\n", 1<<20/100)},
		{"sentences a line 1MiB", strings.Repeat(words(20)+".\n", 1<<20/100)},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(c.text)))
			for b.Loop() {
				splitPasted(c.text)
			}
		})
	}
}

func TestCountWords(t *testing.T) {
	for _, c := range []struct {
		s                   string
		limit               int
		words, lines, plain int
	}{
		{"", 10, 0, 0, 0},
		{"The river (1911), don't.\n  \n\"rises\" here", 10, 6, 2, 6},
		{"f(x) a.go:12: 1,000 e.g. ok", 10, 5, 1, 2},
		{"$1,555.3 54% (3.5) x.y 1. 2.b .5", 10, 7, 1, 4},
		{"one two three four", 2, 2, 1, 2}, // stops after the second word, which it reads whole
		{"one\ntwo\nthree", 10, 3, 3, 3},
		{"état ça\tva", 10, 3, 1, 3},
	} {
		w, l, p := countWords(c.s, c.limit)
		require.Equal(t, []int{c.words, c.lines, c.plain}, []int{w, l, p}, "%q", c.s)
	}
}
