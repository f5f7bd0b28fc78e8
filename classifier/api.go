package classifier

import "strings"

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
	// Classifier.LabelThreshold), else FastLabel. The gateway's decision may
	// still send a slow-labelled request fast under load.
	Label int
	// Tokens is the number of word pieces the encoder saw, after truncation
	// and including [CLS] and [SEP].
	Tokens int
}

// Separator joins instruction and context in the classifier's input format,
// "instruction [SEP] context". The tokenizer maps the literal "[SEP]" to the
// special separator token, exactly as the training notebook does.
const Separator = " [SEP] "

// FormatInput builds the text the model was trained on: the instruction
// alone, or "instruction [SEP] context" when there is a context.
func FormatInput(instruction, context string) string {
	instruction = strings.TrimSpace(instruction)
	context = strings.TrimSpace(context)
	if context == "" {
		return instruction
	}
	return instruction + Separator + context
}
