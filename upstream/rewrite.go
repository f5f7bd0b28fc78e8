package upstream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/triage-gw/triage/internal/jsonscan"
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
	open := 0
	for open < len(body) && (body[open] == ' ' || body[open] == '\t' || body[open] == '\n' || body[open] == '\r') {
		open++
	}
	members, end, err := jsonscan.Object(body, 0)
	switch {
	case errors.Is(err, jsonscan.ErrNotObject):
		return nil, fmt.Errorf("%w: top level is not an object", ErrInvalidBody)
	case err != nil:
		return nil, fmt.Errorf("%w: %v", ErrInvalidBody, err)
	case len(bytes.TrimLeft(body[end:], " \t\r\n")) > 0:
		return nil, fmt.Errorf("%w: data after the object", ErrInvalidBody)
	}
	doc := &modelDoc{body: body, open: open, empty: len(members) == 0}
	for _, m := range members {
		if m.Name == "model" {
			doc.spans = append(doc.spans, [2]int{m.Start, m.End})
		}
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
