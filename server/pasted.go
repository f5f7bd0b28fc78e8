package server

import "strings"

// A user who wants a document summarised, or a question answered from it, pastes the document
// into the message: "Summarize this:\n\n<article>" or "<article>\n\nWhat does it say about X?".
// The model reads an instruction and, apart, its context (a [SEP] between them, has_context
// set); a document pasted into the instruction reads as one long request instead, and Dolly's
// summarization test rows sent so were classified right 10% of the time (14% by MiniLM alone),
// against 100% with the article as the context (docs/http-api.md, "Pasted documents"). So a
// text without a context whose first or last paragraph is short and the rest long is
// classified as that paragraph, the instruction, with the rest as its context; the request
// goes upstream as it came. server.split_pasted: false turns this off.
//
// The rest must be prose (mostly plain words): the model learnt "a context means fast" from
// Dolly's passages of prose, which says nothing of code, logs or stack traces pasted beside a
// request ("Fix this:", "Why does this fail?"). Those are read whole, as the model was
// trained to read a request of its own.
//
// Many send the request and the document a single newline apart ("Summarize this:\n<article>",
// Shift+Enter in a chat box, or a prompt template); Dolly's summarization rows sent so were
// classified right 27% of the time. A single newline is weaker evidence than a blank line:
// lists, poems, code and hard-wrapped prose are full of them. So when no paragraph qualifies,
// a first or last line qualifies on the same word counts when the rest reads as prose and the
// line is not a piece of wrapped text: a first line must end a sentence (or with a colon) or
// be followed by a line too long to be wrapped text; a last line must follow a line that ends
// a sentence or is too long to be wrapped text (else it is the tail of a wrapped paragraph).

const (
	// pastedInstructionWords is the most words the instruction paragraph may have: 99% of
	// Dolly's instructions have at most 46.
	pastedInstructionWords = 48
	// pastedContextWords is the fewest words the rest may have, and it must have twice the
	// instruction's too: a short paragraph beside another ("I'm going to Japan.\n\nWhat
	// should I see?") is one request, not an instruction and its document. 95% of Dolly's
	// contexts have at least 36 words.
	pastedContextWords = 32
	// pastedLineWords is the fewest words a line the rest of a single-newline split must
	// have on average (over the words it reads): prose, not a list, a poem or code. Dolly's
	// contexts have at least 10 in 98.6% of cases; lists have 1 to 4, Go source 3 to 6, and
	// text wrapped at 72 columns about 12.
	pastedLineWords = 10
	// pastedPlainPercent is the least share of plain words (letters, digits, apostrophes and
	// hyphens, between quotes, brackets and punctuation) the rest must have among the words it
	// reads, under either rule: prose, not code, logs or paths. 99.9% of Dolly's contexts have
	// 85% or more; 30-line pieces of Go, Python and JavaScript source have medians of 55 to
	// 64% (4 to 8% of them reach 85%), grep hits 55%, stack traces 50%.
	pastedPlainPercent = 85
	// pastedWrapBytes is the longest line taken for hard-wrapped text (editors and mail wrap
	// at 72 to 80 columns).
	pastedWrapBytes = 100
)

// splitPasted returns text's instruction and context under the rules above. ok is false when
// neither applies. It reads a bounded part of text whatever its length: each end until its
// paragraph or line is known to be too long, and the rest's words until there are enough (each
// scan also stops after 64 bytes a word on average, so a blob without spaces is not read
// through).
func splitPasted(text string) (instruction, context string, ok bool) {
	text = strings.TrimSpace(text)
	if strings.IndexByte(text, '\n') < 0 { // one line: most requests
		return "", "", false
	}
	if instruction, context, ok = splitEnds(text, true); ok {
		return instruction, context, true
	}
	return splitEnds(text, false)
}

// splitEnds applies one rule: paragraphs (separated by a line of nothing but spaces) when
// blank, else lines. Of the first and the last, those with at most pastedInstructionWords
// words and at least max(pastedContextWords, twice theirs) in the rest qualify, and the shorter
// wins (the first on a tie), unless the first ends with a colon: it introduces what follows
// ("Summarize this article:"), and a short last paragraph is then part of the document (a
// source, a signature).
func splitEnds(text string, blank bool) (instruction, context string, ok bool) {
	first, afterFirst, nf, okFirst := endParagraph(text, false, blank)
	last, beforeLast, nl, okLast := endParagraph(text, true, blank)
	if !blank {
		okFirst = okFirst && (endsSentence(first) || longLine(afterFirst, false))
		okLast = okLast && (endsSentence(beforeLast) || longLine(beforeLast, true))
	}
	enough := func(n int, rest string) bool {
		need := max(pastedContextWords, 2*n)
		words, lines, plain := countWords(rest, max(need, 64)) // enough words to judge prose by
		return words >= need && 100*plain >= pastedPlainPercent*words && (blank || words >= pastedLineWords*lines)
	}
	okFirst = okFirst && enough(nf, afterFirst)
	okLast = okLast && enough(nl, beforeLast)
	switch {
	case okFirst && (!okLast || nf <= nl || introduces(first)):
		return first, afterFirst, true
	case okLast:
		return last, beforeLast, true
	}
	return "", "", false
}

// endParagraph returns the paragraph at one end of text (trimmed), the rest of text, trimmed,
// and the paragraph's word count, when the paragraph has at most pastedInstructionWords words
// and a blank line ends it (any newline, unless blank). fromEnd reads text backwards, for its
// last paragraph.
func endParagraph(text string, fromEnd, blank bool) (paragraph, rest string, words int, ok bool) {
	at := func(k int) byte { // the k-th byte in reading order
		if fromEnd {
			return text[len(text)-1-k]
		}
		return text[k]
	}
	in := false
	for k := 0; k < len(text) && k < 64*(pastedInstructionWords+1); k++ {
		switch c := at(k); {
		case c == '\n':
			j := k + 1
			for blank && j < len(text) && isLineSpace(at(j)) {
				j++
			}
			if !blank || j < len(text) && at(j) == '\n' { // bytes [0, k) are the paragraph
				if fromEnd {
					return strings.TrimSpace(text[len(text)-k:]), strings.TrimSpace(text[:len(text)-j]), words, true
				}
				return strings.TrimSpace(text[:k]), strings.TrimSpace(text[j:]), words, true
			}
			in = false
		case isSpace(c):
			in = false
		case !in:
			in = true
			if words++; words > pastedInstructionWords {
				return "", "", 0, false
			}
		}
	}
	return "", "", 0, false
}

// longLine reports whether the line at one end of text (its first, or its last when fromEnd) is
// longer than pastedWrapBytes: too long to be a line of hard-wrapped text. It reads at most
// pastedWrapBytes+1 bytes.
func longLine(text string, fromEnd bool) bool {
	if len(text) <= pastedWrapBytes {
		return false
	}
	if fromEnd {
		return strings.IndexByte(text[len(text)-pastedWrapBytes-1:], '\n') < 0
	}
	return strings.IndexByte(text[:pastedWrapBytes+1], '\n') < 0
}

// closers are what may follow a sentence's last mark: spaces, closing quotes, brackets and
// emphasis.
const closers = " \t\r\"')*_\u201d\u2019\u00bb"

// endsSentence reports whether line ends with a full stop, a question or exclamation mark or a
// colon, before any closing quotes, brackets, emphasis or citation marks ("[12]").
func endsSentence(line string) bool {
	for {
		line = strings.TrimRight(line, closers)
		if !strings.HasSuffix(line, "]") {
			break
		}
		i := strings.LastIndexByte(line, '[')
		if i < 0 || strings.Trim(line[i+1:len(line)-1], "0123456789") != "" {
			break
		}
		line = line[:i]
	}
	return line != "" && strings.IndexByte(".?!:", line[len(line)-1]) >= 0
}

// introduces reports whether paragraph ends with a colon, before any closing quotes.
func introduces(paragraph string) bool {
	return strings.HasSuffix(strings.TrimRight(paragraph, closers), ":")
}

// isLineSpace reports whether c is a space within a line (a blank line may hold them).
func isLineSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// isSpace reports whether c is ASCII white space.
func isSpace(c byte) bool { return c == '\n' || isLineSpace(c) }

// countWords counts s's space-separated words, the lines they are on and the plain words among
// them (isPlain), stopping at limit words (after the last one) or after 64*limit bytes.
func countWords(s string, limit int) (words, lines, plain int) {
	start, fresh := -1, true
	i := 0
	for ; i < len(s) && i < 64*limit && (words < limit || start >= 0); i++ {
		c := s[i]
		if !isSpace(c) {
			if start < 0 {
				start, words = i, words+1
				if fresh {
					lines, fresh = lines+1, false
				}
			}
			continue
		}
		if start >= 0 && isPlain(s[start:i]) {
			plain++
		}
		start = -1
		if c == '\n' {
			fresh = true
		}
	}
	if start >= 0 && isPlain(s[start:i]) {
		plain++
	}
	return words, lines, plain
}

// isPlain reports whether w is a word of prose: letters (any non-ASCII byte counts as one),
// digits (with points and commas between them), apostrophes and hyphens, after any opening
// quotes, brackets or dollar sign and before any punctuation, closing ones or per cent sign.
// "(1911),", "don't.", "$1,555.3" and "54%" are; "f(x)", "a.go:12:" and "x.y" are not.
func isPlain(w string) bool {
	i, j := 0, len(w)
	for i < j && wordClass[w[i]] == opening {
		i++
	}
	for j > i && (wordClass[w[j-1]] == closing || w[j-1] == '\'' || w[j-1] == '"') {
		j--
	}
	for k := i; k < j; k++ {
		if wordClass[w[k]] != plainByte && !((w[k] == '.' || w[k] == ',') && k > i && k+1 < j && isDigit(w[k-1]) && isDigit(w[k+1])) {
			return false
		}
	}
	return i < j
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// wordClass sorts bytes for isPlain.
var wordClass = func() (t [256]byte) {
	for c := range 256 {
		switch {
		case c >= 0x80, c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '\'', c == '-':
			t[c] = plainByte
		}
	}
	for _, c := range "([\"$" {
		t[c] = opening
	}
	for _, c := range ".,;:!?)]%" {
		t[c] = closing
	}
	return t
}()

const (
	plainByte = 1 + iota
	opening
	closing
)
