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

const (
	// pastedInstructionWords is the most words the instruction paragraph may have: 99% of
	// Dolly's instructions have at most 46.
	pastedInstructionWords = 48
	// pastedContextWords is the fewest words the rest may have, and it must have twice the
	// instruction's too: a short paragraph beside another ("I'm going to Japan.\n\nWhat
	// should I see?") is one request, not an instruction and its document. 95% of Dolly's
	// contexts have at least 36 words.
	pastedContextWords = 32
)

// splitPasted returns text's instruction and context under the rule above: paragraphs are
// separated by a line of nothing but spaces; of the first and the last paragraph, those with
// at most pastedInstructionWords words and at least max(pastedContextWords, twice theirs) in
// the rest qualify, and the shorter wins (the first on a tie). ok is false when none does.
// It reads a bounded part of text whatever its length: each end until its paragraph is known
// to be too long, and the rest's words until there are enough (each scan also stops after 64
// bytes a word on average, so a blob without spaces is not read through).
func splitPasted(text string) (instruction, context string, ok bool) {
	text = strings.TrimSpace(text)
	if strings.IndexByte(text, '\n') < 0 { // one line: most requests
		return "", "", false
	}
	first, afterFirst, nf, okFirst := endParagraph(text, false)
	last, beforeLast, nl, okLast := endParagraph(text, true)
	enough := func(n int, rest string) bool {
		need := max(pastedContextWords, 2*n)
		return countWords(rest, need) >= need
	}
	okFirst = okFirst && enough(nf, afterFirst)
	okLast = okLast && enough(nl, beforeLast)
	switch {
	case okFirst && (!okLast || nf <= nl):
		return first, afterFirst, true
	case okLast:
		return last, beforeLast, true
	}
	return "", "", false
}

// endParagraph returns the paragraph at one end of text (trimmed, no blank line in it), the
// rest of text, trimmed, and the paragraph's word count, when the paragraph has at most
// pastedInstructionWords words and a blank line ends it. fromEnd reads text backwards, for
// its last paragraph.
func endParagraph(text string, fromEnd bool) (paragraph, rest string, words int, ok bool) {
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
			for j < len(text) && isLineSpace(at(j)) {
				j++
			}
			if j < len(text) && at(j) == '\n' { // a blank line: bytes [0, k) are the paragraph
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

// isLineSpace reports whether c is a space within a line (a blank line may hold them).
func isLineSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' }

// isSpace reports whether c is ASCII white space.
func isSpace(c byte) bool { return c == '\n' || isLineSpace(c) }

// countWords counts s's space-separated words, stopping at limit words or after 64*limit
// bytes.
func countWords(s string, limit int) int {
	n, in := 0, false
	for i := 0; i < len(s) && i < 64*limit && n < limit; i++ {
		if isSpace(s[i]) {
			in = false
		} else if !in {
			in = true
			n++
		}
	}
	return n
}
