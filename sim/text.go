package sim

import (
	"hash/fnv"
	"strings"
)

// words is the simulator's whole vocabulary.
var words = [16]string{
	"alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel",
	"india", "juliett", "kilo", "lima", "mike", "november", "oscar", "papa",
}

// CountTokens approximates a tokenizer: ceil(len(text)/4), counting UTF-8
// bytes. It is the prompt_tokens of every response.
func CountTokens(text string) int { return (len(text) + 3) / 4 }

// Token returns output token i (0-based) for a rendered prompt.
//
// Let h be the FNV-1a 64-bit hash of the prompt's bytes and
// w = words[(h + i) mod 16], where words is the NATO alphabet from "alpha"
// to "papa". Token 0 is w; every later token is " " + w. So the text is
// the words, starting at a prompt-dependent one and cycling through the
// list in order, separated by single spaces.
func Token(prompt string, i int) string { return tokenText(promptHash(prompt), i) }

func tokenText(h uint64, i int) string {
	w := words[(h+uint64(i))%uint64(len(words))]
	if i == 0 {
		return w
	}
	return " " + w
}

// GeneratedText returns the first n output tokens for prompt, concatenated:
// the content of a non-streaming answer, and of a stream's deltas joined.
func GeneratedText(prompt string, n int) string { return generatedText(promptHash(prompt), n) }

// generatedText is the answer of n tokens for the prompt hashed to h.
func generatedText(h uint64, n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(tokenText(h, i))
	}
	return b.String()
}

func promptHash(prompt string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(prompt))
	return h.Sum64()
}

// Message is one chat message as the simulator sees it: its role and its
// text content (the text parts of a multi-part content, concatenated).
type Message struct {
	Role    string
	Content string
}

// RenderChat renders chat messages into the prompt the simulator counts,
// caches and hashes: "role: content\n" for each message, in order.
func RenderChat(msgs []Message) string {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString(m.Role)
		b.WriteString(": ")
		b.WriteString(m.Content)
		b.WriteByte('\n')
	}
	return b.String()
}
