package classifier

import (
	"errors"
	"fmt"
)

// Errors a model returns (package classifier/onnx's, or a fake in tests).
// The input errors come back for one text, or as a *TextError naming it in a
// call of many: a model's Classify rejects the whole call when any text is
// invalid, so the caller can answer 400 naming the text.
var (
	ErrEmptyText   = errors.New("text is empty")
	ErrInvalidUTF8 = errors.New("text is not valid UTF-8")
	ErrClosed      = errors.New("classifier is closed")
	// ErrNoStatic: the loaded model has no static stage (its manifest has
	// no "static" section, like the int8 variant's).
	ErrNoStatic = errors.New("model has no static stage")
	// ErrForeignTokens: the Tokens were made by a classifier with another
	// tokenizer or truncation; tokenize the text again with this one.
	ErrForeignTokens = errors.New("tokens come from another tokenizer")
)

// TextError says which text of a Classify call was rejected.
type TextError struct {
	Index int
	Err   error
}

func (e *TextError) Error() string { return fmt.Sprintf("texts[%d]: %v", e.Index, e.Err) }
func (e *TextError) Unwrap() error { return e.Err }
