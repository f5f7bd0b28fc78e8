package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
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
func objectFields(raw []byte, within string, strict, top bool, fields map[string]*json.RawMessage) error {
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
		if dst, ok := fields[name]; ok {
			if seen[name] {
				return badRequest("duplicate_field", within+name, "%s%s: given twice; give each field once", within, name)
			}
			seen[name] = true
			*dst = val
			continue
		}
		for known := range fields {
			if strings.EqualFold(known, name) {
				return badRequest("field_case", within+known, "%s%s: field names are case-sensitive; got %s", within, known, clip(name))
			}
		}
		if strict {
			return badRequest("unknown_field", within+truncName(name), "%s%s: unknown field", within, clip(name))
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
