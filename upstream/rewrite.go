package upstream

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// RewriteModel returns body with its top-level "model" member's value
// replaced by model, or with "model" inserted first when absent. Every other
// byte is kept as it was: member order, whitespace, number spelling and
// unknown fields. Duplicate top-level "model" members are all replaced, so
// no JSON reader can see the old value. Nested "model" keys are untouched.
// body must be exactly one JSON object, else the error wraps ErrInvalidBody.
func RewriteModel(body []byte, model string) ([]byte, error) {
	d, err := parseModelDoc(body)
	if err != nil {
		return nil, err
	}
	return d.with(model), nil
}

// modelDoc is a JSON object with the positions of its top-level "model"
// values, parsed once per request and spliced per attempt.
type modelDoc struct {
	body  []byte
	open  int      // offset of the opening '{'
	empty bool     // the object has no members
	spans [][2]int // [start, end) of each top-level "model" value
}

func parseModelDoc(body []byte) (*modelDoc, error) {
	invalid := func(err error) error { return fmt.Errorf("%w: %v", ErrInvalidBody, err) }
	dec := json.NewDecoder(bytes.NewReader(body))
	tok, err := dec.Token()
	if err != nil {
		return nil, invalid(err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, fmt.Errorf("%w: top level is %v", ErrInvalidBody, tok)
	}
	doc := &modelDoc{body: body, open: int(dec.InputOffset()) - 1, empty: true}
	for dec.More() {
		doc.empty = false
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid(err)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalid(err)
		}
		if key, _ := tok.(string); key != "model" {
			continue
		}
		// A decoded RawMessage is the value's exact bytes and InputOffset
		// is just past them; check rather than trust the arithmetic.
		end := int(dec.InputOffset())
		start := end - len(raw)
		if start < 0 || end > len(body) || !bytes.Equal(body[start:end], raw) {
			return nil, fmt.Errorf("%w: cannot locate the \"model\" value", ErrInvalidBody)
		}
		doc.spans = append(doc.spans, [2]int{start, end})
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return nil, invalid(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the object", ErrInvalidBody)
	}
	return doc, nil
}

func (d *modelDoc) with(model string) []byte {
	var val bytes.Buffer
	enc := json.NewEncoder(&val)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(model) // a string always encodes
	v := bytes.TrimSuffix(val.Bytes(), []byte("\n"))

	if len(d.spans) == 0 {
		out := make([]byte, 0, len(d.body)+len(v)+10)
		out = append(out, d.body[:d.open+1]...)
		out = append(out, `"model":`...)
		out = append(out, v...)
		if !d.empty {
			out = append(out, ',')
		}
		return append(out, d.body[d.open+1:]...)
	}
	out := make([]byte, 0, len(d.body)+len(v)*len(d.spans))
	last := 0
	for _, s := range d.spans {
		out = append(out, d.body[last:s[0]]...)
		out = append(out, v...)
		last = s[1]
	}
	return append(out, d.body[last:]...)
}
