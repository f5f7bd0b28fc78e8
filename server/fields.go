package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"

	"github.com/triage-gw/triage/internal/jsonscan"
)

// maxQuoted bounds how much of a client's input an error message repeats.
const maxQuoted = 64

// clip quotes s for an error message, cut to maxQuoted bytes (on a rune boundary) with the
// full length said, so a 200 KB key is not echoed back.
func clip(s string) string {
	if len(s) <= maxQuoted {
		return fmt.Sprintf("%q", s)
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:cut], len(s))
}

// objectFields reads one JSON object's members into the raw values named by fields, matching
// member names exactly. encoding/json matches them case-insensitively, so {"MESSAGES": ...}
// would fill Messages although a replica, which matches exactly, never reads it: the gateway
// would classify a text the replica does not see. So this refuses, with a 400 naming the
// member:
//
//   - a member whose name equals a known field's except for case (field_case);
//   - a known field given twice (duplicate_field): JSON readers disagree on which one wins;
//   - when strict, any other member (unknown_field).
//
// Other members of a loose object pass untouched. within prefixes the names in errors
// ("texts[2]."). Trailing data after the object is an error only when top is set (the whole
// body); nested values come from a parser that has already checked it.
//
// The body is read with jsonscan, in one pass that validates it; a nested object is split
// into its members without validating it again. Where the body is not valid JSON, or not an
// object, encoding/json reads it again for its error (objectFieldsDecoder): the 400 says what
// it always said.
func objectFields(raw []byte, within string, strict, top bool, fields map[string]*json.RawMessage) error {
	var members []jsonscan.Member
	switch {
	case top:
		ms, end, err := jsonscan.Object(raw, 0)
		if err != nil || len(bytes.TrimLeft(raw[end:], " \t\r\n")) > 0 {
			return objectFieldsDecoder(raw, within, strict, top, fields)
		}
		members = ms
	case len(raw) > 0 && raw[0] == '{':
		members = jsonscan.Members(raw)
	default:
		return objectFieldsDecoder(raw, within, strict, top, fields)
	}
	seen := make(map[string]bool, len(fields))
	for _, m := range members {
		if err := takeMember(m.Name, m.Value, within, strict, fields, seen); err != nil {
			return err
		}
	}
	return nil
}

// takeMember applies objectFields' rules to one member: a known field is stored in fields
// (once: seen records it), a case variant of one and, when strict, any other name are 400s.
func takeMember(name string, val json.RawMessage, within string, strict bool, fields map[string]*json.RawMessage, seen map[string]bool) error {
	if dst, ok := fields[name]; ok {
		if seen[name] {
			return badRequest("duplicate_field", within+name, "%s%s: given twice; give each field once", within, name)
		}
		seen[name] = true
		*dst = val
		return nil
	}
	for known := range fields {
		if strings.EqualFold(known, name) {
			return badRequest("field_case", within+known, "%s%s: field names are case-sensitive; got %s", within, known, clip(name))
		}
	}
	if strict {
		return badRequest("unknown_field", within+truncName(name), "%s%s: unknown field", within, clip(name))
	}
	return nil
}

// objectFieldsDecoder is objectFields with encoding/json's Decoder: what read every body
// before jsonscan, and what names the problem of a body that is not a valid object.
func objectFieldsDecoder(raw []byte, within string, strict, top bool, fields map[string]*json.RawMessage) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return jsonError(err, strings.TrimSuffix(within, "."))
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		p := strings.TrimSuffix(within, ".")
		return badRequest("invalid_type", p, "%s: must be a JSON object, got %s", nonEmpty(p, "body"), jsonKind(raw))
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return jsonError(err, strings.TrimSuffix(within, "."))
		}
		name, _ := tok.(string)
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return jsonError(err, within+name)
		}
		if err := takeMember(name, val, within, strict, fields, seen); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return jsonError(err, strings.TrimSuffix(within, "."))
	}
	if top {
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			return badRequest("invalid_json", "", "unexpected data after the JSON object")
		}
	}
	return nil
}

// truncName bounds a client-chosen name used as an error's param.
func truncName(s string) string {
	if len(s) <= maxQuoted {
		return s
	}
	cut := maxQuoted
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// arrayItems is the elements of an array value that came out of a body objectFields has
// read (so it is valid JSON), each exactly as sent. A value that is not an array gets
// encoding/json's error, named by param, as before.
func arrayItems(raw json.RawMessage, param string) ([]json.RawMessage, error) {
	if len(raw) == 0 || raw[0] != '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, jsonError(err, param)
		}
		return items, nil
	}
	els := jsonscan.Elements(raw)
	out := make([]json.RawMessage, len(els))
	for i, e := range els {
		out[i] = e
	}
	return out, nil
}
