package classifier

import (
	"fmt"
	"strings"
)

// SlowLabel and FastLabel are the model's labels: 1 routes to the slow
// (large-model) pool, 0 to the fast one.
const (
	FastLabel = 0
	SlowLabel = 1
)

// Result is the model's output for one text.
type Result struct {
	// PSlow is P(slow | text) from the logistic-regression head, in [0, 1].
	PSlow float32
	// Label is SlowLabel when PSlow > the manifest's label_threshold (see
	// the model's LabelThreshold), else FastLabel. The gateway's decision may
	// still send a slow-labelled request fast under load.
	Label int
	// Tokens is the number of word pieces the encoder saw, after truncation
	// and including [CLS] and [SEP].
	Tokens int
	// Stage is the model that produced PSlow. Its zero value is StageEncoder,
	// what a model's Classify and ClassifyTokens return.
	Stage Stage
}

// Stage names the model behind a Result.
type Stage uint8

const (
	// StageEncoder: tokenizer → MiniLM encoder → mean pooling → head.
	StageEncoder Stage = iota
	// StageStatic: the static table distilled from the encoder and its own
	// head (Static.Score; a model's StaticScore), microseconds per text. Its P(slow) is meant to
	// stand only when the Band decides it.
	StageStatic
)

// String is "encoder" or "static" (for metrics labels and headers).
func (s Stage) String() string {
	switch s {
	case StageEncoder:
		return "encoder"
	case StageStatic:
		return "static"
	}
	return fmt.Sprintf("stage(%d)", uint8(s))
}

// Separator joins instruction and context in the classifier's input format,
// "instruction [SEP] context". The tokenizer maps the literal "[SEP]" to the
// special separator token, exactly as the training notebook does.
const Separator = " [SEP] "

// FormatInput builds the model's input: the instruction alone, or
// "instruction [SEP] context" when there is a context. A model trained behind
// the noise filter (Manifest.TextFilter) gets it through FilterInput.
func FormatInput(instruction, context string) string {
	instruction = strings.TrimSpace(instruction)
	context = strings.TrimSpace(context)
	if context == "" {
		return instruction
	}
	return instruction + Separator + context
}

// FilterInput applies filter (FilterNoise, or the one a model's manifest names: TextFilter)
// to the instruction of text, an input built by
// FormatInput (and whitespace-normalised): the part before the first Separator, or
// all of it when there is none. The context is left as it is: it is a document the
// request carries, and whether there is one (has_context) is what the heads read
// from it. The training notebook filters the instruction before joining (its fmt),
// which is the same text unless the instruction itself holds a literal " [SEP] ".
// text is returned as it is when nothing is dropped.
func FilterInput(text string, filter func(string) string) string {
	instruction, context, found := strings.Cut(text, Separator)
	f := strings.TrimSpace(filter(instruction))
	if f == instruction {
		return text
	}
	if !found {
		return f
	}
	return f + Separator + context
}
