package classifier

// Tokens is one text tokenized for both stages: the word-piece ids the
// encoder sees (truncated to the manifest's max_tokens, [CLS] first, [SEP]
// last), tagged with the tokenizer that made them. A model makes them (the
// Tokenize of classifier/onnx); the zero value is refused by both stages.
// It is immutable and may cross goroutines.
type Tokens struct {
	ids   []uint32
	tokID string // tokenizer sha256 and truncation of the classifier that made it
}

// NewTokens tags ids with the tokenizer that made them: tokenizerID names
// the tokenizer and truncation, so that ids are interchangeable exactly
// between models with equal tokenizerIDs. The Tokens keep ids; the caller
// must not modify them afterwards.
func NewTokens(ids []uint32, tokenizerID string) Tokens {
	return Tokens{ids: ids, tokID: tokenizerID}
}

// Len is the number of word pieces, [CLS] and [SEP] included (the encoder's
// cost is about linear in it).
func (t Tokens) Len() int { return len(t.ids) }

// IDsFor returns the word-piece ids and true when t was made by the
// tokenizer named tokenizerID and holds at least one id, else nil and false
// (the zero Tokens, or tokens of another tokenizer or truncation: a model
// answers ErrForeignTokens). The slice is shared and must not be modified.
func (t Tokens) IDsFor(tokenizerID string) ([]uint32, bool) {
	if t.tokID != tokenizerID || len(t.ids) == 0 {
		return nil, false
	}
	return t.ids, true
}
