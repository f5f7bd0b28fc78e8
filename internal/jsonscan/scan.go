// Package jsonscan walks JSON request bodies in one pass: it validates a value and finds the
// spans of an object's members or an array's elements without decoding what it skips, and
// unquotes a string. It is what the gateway reads its requests with on the way to a replica:
// encoding/json's Decoder reads every value of a body three to five times over (its scanner
// steps through strings one byte at a time, and Token, Decode into a RawMessage and
// Unmarshal each scan it again), which made a chat request with a 100 KB message cost the
// gateway about 5 ms before it was sent.
//
// It accepts exactly what encoding/json accepts (RFC 8259; FuzzAgreesWithEncodingJSON holds
// it to json.Valid and json.Unmarshal). It does not check UTF-8: the gateway refuses a body
// that is not valid UTF-8 before it reads it. Its errors only say where a value went wrong;
// a caller that needs encoding/json's wording runs encoding/json on the (invalid) body.
package jsonscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// MaxDepth bounds the nesting of arrays and objects, as encoding/json's does.
const MaxDepth = 10000

// SyntaxError is an invalid value: Offset is the byte where reading it failed.
type SyntaxError struct {
	Offset int
	msg    string
}

func (e *SyntaxError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.Offset) + ": " + e.msg
}

func fail(i int, msg string) error { return &SyntaxError{Offset: i, msg: msg} }

// errNotObject and errNotArray are returned when a value is valid JSON of another kind.
var (
	ErrNotObject = errors.New("not a JSON object")
	ErrNotArray  = errors.New("not a JSON array")
)

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// skipSpace returns the first index at or after i that is not JSON whitespace.
func skipSpace(data []byte, i int) int {
	for i < len(data) && isSpace(data[i]) {
		i++
	}
	return i
}

// Valid reports whether data is exactly one JSON value, with whitespace around it.
func Valid(data []byte) bool {
	end, err := Skip(data, 0)
	return err == nil && skipSpace(data, end) == len(data)
}

// Skip reads the value that starts at data[i] (after whitespace) and returns the index just
// past it.
func Skip(data []byte, i int) (int, error) {
	return skip(data, skipSpace(data, i), 0)
}

func skip(data []byte, i, depth int) (int, error) {
	if i >= len(data) {
		return i, fail(i, "unexpected end of input")
	}
	switch c := data[i]; {
	case c == '"':
		end, _, err := stringEnd(data, i)
		return end, err
	case c == '{':
		if depth >= MaxDepth {
			return i, fail(i, "exceeded max depth")
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == '}' {
			return i + 1, nil
		}
		for {
			if i >= len(data) || data[i] != '"' {
				return i, fail(i, "expected a member name")
			}
			end, _, err := stringEnd(data, i)
			if err != nil {
				return end, err
			}
			i = skipSpace(data, end)
			if i >= len(data) || data[i] != ':' {
				return i, fail(i, "expected ':' after a member name")
			}
			if i, err = skip(data, skipSpace(data, i+1), depth+1); err != nil {
				return i, err
			}
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == '}' {
				return i + 1, nil
			}
			return i, fail(i, "expected ',' or '}' after a member")
		}
	case c == '[':
		if depth >= MaxDepth {
			return i, fail(i, "exceeded max depth")
		}
		i = skipSpace(data, i+1)
		if i < len(data) && data[i] == ']' {
			return i + 1, nil
		}
		for {
			var err error
			if i, err = skip(data, i, depth+1); err != nil {
				return i, err
			}
			i = skipSpace(data, i)
			if i < len(data) && data[i] == ',' {
				i = skipSpace(data, i+1)
				continue
			}
			if i < len(data) && data[i] == ']' {
				return i + 1, nil
			}
			return i, fail(i, "expected ',' or ']' after an element")
		}
	case c == 't':
		return literal(data, i, "true")
	case c == 'f':
		return literal(data, i, "false")
	case c == 'n':
		return literal(data, i, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return number(data, i)
	}
	return i, fail(i, "invalid character "+strconv.QuoteRune(rune(data[i]))+" looking for a value")
}

func literal(data []byte, i int, lit string) (int, error) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return i, fail(i, "invalid literal")
	}
	return i + len(lit), nil
}

// number reads -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(data []byte, i int) (int, error) {
	start := i
	if data[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(data) && data[i] >= '0' && data[i] <= '9' {
			i++
			n++
		}
		return n
	}
	switch {
	case i < len(data) && data[i] == '0':
		i++
	case digits() == 0:
		return i, fail(start, "invalid number")
	}
	if i < len(data) && data[i] == '.' {
		i++
		if digits() == 0 {
			return i, fail(start, "invalid number")
		}
	}
	if i < len(data) && (data[i] == 'e' || data[i] == 'E') {
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		if digits() == 0 {
			return i, fail(start, "invalid number")
		}
	}
	return i, nil
}

// stringEnd reads the string that starts at data[i] ('"') and returns the index past its
// closing quote and whether it holds an escape.
func stringEnd(data []byte, i int) (int, bool, error) {
	escaped := false
	for j := i + 1; j < len(data); j++ {
		// Eight bytes at a time while none of them is special: most of a long string.
		for j+8 <= len(data) && !special8(binary.LittleEndian.Uint64(data[j:])) {
			j += 8
		}
		if j >= len(data) {
			break
		}
		if plain[data[j]] {
			continue
		}
		switch c := data[j]; {
		case c == '"':
			return j + 1, escaped, nil
		case c == '\\':
			escaped = true
			j++
			if j >= len(data) {
				return j, true, fail(j, "unexpected end of input in a string")
			}
			switch data[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(data)-j < 5 || !isHex4(data[j+1:j+5]) {
					return j, true, fail(j, "invalid \\u escape")
				}
				j += 4
			default:
				return j, true, fail(j, "invalid escape in a string")
			}
		case c < 0x20:
			return j, escaped, fail(j, "control character in a string")
		}
	}
	return len(data), escaped, fail(len(data), "unexpected end of input in a string")
}

// special8 reports whether any of the eight bytes in x is a quote, a backslash or a control
// character (below 0x20), with the word-at-a-time tests of "Bit Twiddling Hacks" (a byte
// equal to n: zero(x ^ n·0x01…01); a byte below n: (x − n·0x01…01) &^ x & 0x80…80).
func special8(x uint64) bool {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	zero := func(v uint64) uint64 { return (v - ones) &^ v & highs }
	return (zero(x^(ones*'"')) | zero(x^(ones*'\\')) | ((x - ones*0x20) &^ x & highs)) != 0
}

// plain marks the bytes a string holds as they are: not the quote, the backslash or a
// control character.
var plain = func() (t [256]bool) {
	for c := range t {
		t[c] = c >= 0x20 && c != '"' && c != '\\'
	}
	return t
}()

func isHex4(b []byte) bool {
	for _, c := range b[:4] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// Member is one member of an object: its name (unquoted) and the span of its value.
type Member struct {
	Name  string
	Value []byte // the value's bytes, exactly as in the body
	// NameStart is the offset of the name's opening quote in the object's data; Start and
	// End are the value's offsets there. data[NameStart:End] is the member as written.
	NameStart, Start, End int
}

// Object reads the object that starts at data[i] (after whitespace) and returns its members
// in order, duplicates included, and the index just past it. A valid value of another kind
// is ErrNotObject.
func Object(data []byte, i int) ([]Member, int, error) {
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != '{' {
		if _, err := Skip(data, i); err != nil {
			return nil, i, err
		}
		return nil, i, ErrNotObject
	}
	var out []Member
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return out, i + 1, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return nil, i, fail(i, "expected a member name")
		}
		nameStart := i
		end, escaped, err := stringEnd(data, i)
		if err != nil {
			return nil, end, err
		}
		var name string
		if escaped {
			name = unquote(data[i:end])
		} else {
			name = string(data[i+1 : end-1])
		}
		i = skipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return nil, i, fail(i, "expected ':' after a member name")
		}
		start := skipSpace(data, i+1)
		if i, err = skip(data, start, 1); err != nil {
			return nil, i, err
		}
		out = append(out, Member{Name: name, Value: data[start:i:i], NameStart: nameStart, Start: start, End: i})
		i = skipSpace(data, i)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
			continue
		}
		if i < len(data) && data[i] == '}' {
			return out, i + 1, nil
		}
		return nil, i, fail(i, "expected ',' or '}' after a member")
	}
}

// Array reads the array that starts at data[i] (after whitespace) and returns its elements'
// bytes and the index just past it. A valid value of another kind is ErrNotArray.
func Array(data []byte, i int) ([][]byte, int, error) {
	i = skipSpace(data, i)
	if i >= len(data) || data[i] != '[' {
		if _, err := Skip(data, i); err != nil {
			return nil, i, err
		}
		return nil, i, ErrNotArray
	}
	var out [][]byte
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == ']' {
		return out, i + 1, nil
	}
	for {
		start := i
		var err error
		if i, err = skip(data, start, 1); err != nil {
			return nil, i, err
		}
		out = append(out, data[start:i:i])
		i = skipSpace(data, i)
		if i < len(data) && data[i] == ',' {
			i = skipSpace(data, i+1)
			continue
		}
		if i < len(data) && data[i] == ']' {
			return out, i + 1, nil
		}
		return nil, i, fail(i, "expected ',' or ']' after an element")
	}
}

// String returns the text of a JSON string value (raw, as Object or Array gave it, quotes
// included), as encoding/json decodes it: escapes resolved, a \u escape of a lone surrogate
// as U+FFFD. ok is false when raw is not one valid JSON string.
func String(raw []byte) (s string, ok bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return "", false
	}
	end, escaped, err := stringEnd(raw, 0)
	if err != nil || end != len(raw) {
		return "", false
	}
	if !escaped {
		return string(raw[1 : len(raw)-1]), true
	}
	return unquote(raw), true
}

// unquote resolves the escapes of a valid JSON string token.
func unquote(raw []byte) string {
	b := make([]byte, 0, len(raw))
	for i := 1; i < len(raw)-1; i++ {
		c := raw[i]
		if c != '\\' {
			b = append(b, c)
			continue
		}
		i++
		switch raw[i] {
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			if i+5 > len(raw) { // a cut escape: only in a value Members was wrongly given
				return string(append(b, raw[i-1:]...))
			}
			r := hex4(raw[i+1 : i+5])
			i += 4
			if utf16.IsSurrogate(r) {
				// A pair is one code point; a lone half is U+FFFD, as encoding/json has it.
				if i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
					if r2 := hex4(raw[i+3 : i+7]); utf16.DecodeRune(r, r2) != utf8.RuneError {
						b = utf8.AppendRune(b, utf16.DecodeRune(r, r2))
						i += 6
						continue
					}
				}
				r = utf8.RuneError
			}
			b = utf8.AppendRune(b, r)
		default: // '"', '\\', '/'
			b = append(b, raw[i])
		}
	}
	return string(b)
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		default:
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// Members returns the members of an object that has been read already: a value that Object,
// Array or Skip returned, or one inside it. It does not validate again, so it skips strings
// by their quotes alone; given anything else it may return nonsense, never panic.
func Members(obj []byte) []Member {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil
	}
	var out []Member
	i = skipSpace(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		nameStart := i
		end := validStringEnd(obj, i)
		var name string
		if bytes.IndexByte(obj[i:end], '\\') >= 0 {
			name = unquote(obj[i:end])
		} else {
			name = string(obj[i+1 : max(i+1, end-1)])
		}
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return out
		}
		start := skipSpace(obj, i+1)
		i = validEnd(obj, start)
		out = append(out, Member{Name: name, Value: obj[start:i:i], NameStart: nameStart, Start: start, End: i})
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != ',' {
			break
		}
		i = skipSpace(obj, i+1)
	}
	return out
}

// EachMember calls f with the name (quoted, escapes unresolved: Text resolves them) and the
// value of each member of an object that has been read already (see Members), in order,
// until f returns false. Unlike Members it allocates nothing: for a reader that looks at a
// few names of a small object, such as a replica's usage report.
func EachMember(obj []byte, f func(name, value []byte) bool) {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return
	}
	i = skipSpace(obj, i+1)
	for i < len(obj) && obj[i] == '"' {
		end := validStringEnd(obj, i)
		name := obj[i:end:end]
		i = skipSpace(obj, end)
		if i >= len(obj) || obj[i] != ':' {
			return
		}
		start := skipSpace(obj, i+1)
		i = validEnd(obj, start)
		if !f(name, obj[start:i:i]) {
			return
		}
		i = skipSpace(obj, i)
		if i >= len(obj) || obj[i] != ',' {
			return
		}
		i = skipSpace(obj, i+1)
	}
}

// Elements returns the elements of an array that has been read already (see Members).
func Elements(arr []byte) [][]byte {
	i := skipSpace(arr, 0)
	if i >= len(arr) || arr[i] != '[' {
		return nil
	}
	var out [][]byte
	i = skipSpace(arr, i+1)
	for i < len(arr) && arr[i] != ']' {
		start := i
		i = validEnd(arr, start)
		if i == start {
			break
		}
		out = append(out, arr[start:i:i])
		i = skipSpace(arr, i)
		if i >= len(arr) || arr[i] != ',' {
			break
		}
		i = skipSpace(arr, i+1)
	}
	return out
}

// validEnd is the index past the valid value at data[i].
func validEnd(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return validStringEnd(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); {
			k := bytes.IndexAny(data[j:], "\"{}[]")
			if k < 0 {
				return len(data)
			}
			j += k
			switch data[j] {
			case '"':
				j = validStringEnd(data, j)
				continue
			case '{', '[':
				depth++
			default:
				depth--
				if depth == 0 {
					return j + 1
				}
			}
			j++
		}
		return len(data)
	}
	j := i
	for j < len(data) && !isSpace(data[j]) && data[j] != ',' && data[j] != '}' && data[j] != ']' {
		j++
	}
	return j
}

// validStringEnd is the index past the valid string at data[i]: its first quote not escaped.
func validStringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return len(data)
		}
		q := j + k
		n := 0
		for b := q - 1; b > i && data[b] == '\\'; b-- {
			n++
		}
		if n%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
	return len(data)
}

// Text is the text of a string value that has been read already (see Members), as String
// gives it, without validating it again.
func Text(raw []byte) string {
	if len(raw) < 2 {
		return ""
	}
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw[1 : len(raw)-1])
	}
	return unquote(raw)
}
