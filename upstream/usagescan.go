package upstream

import (
	"bytes"
	"strconv"

	"github.com/triage-gw/triage/internal/jsonscan"
)

// The readers here are parseUsage, IsUsageChunk and tokenEvent without encoding/json's
// reflection: every non-streamed answer and every usage chunk went through parseUsage
// (about 10 µs of the 90 µs a cache hit spends in the gateway's handler, in
// BenchmarkProxyChatHit's profile), and every event of a Messages or Responses stream
// through tokenEvent. They read the document with internal/jsonscan, allocating nothing,
// and give encoding/json's answer exactly (FuzzUsageReaders holds them to it), which takes
// four of its rules:
//
//   - a document that is not one valid JSON value, or whose value is not an object, is no
//     report (Unmarshal into a struct fails, or for null leaves it empty);
//   - a member's name matches a field case-insensitively, and the last of duplicates wins:
//     an object decoded into a pointer already set is merged into it, a null resets it;
//   - a field's value of the wrong kind (a string for a count, a number for an object, a
//     count with a fraction or an exponent, or past int64) fails the whole document;
//   - a null for a string field leaves it as it was.
//
// Case-insensitive matching has Unicode rules (encoding/json upper-cases each rune: "ſ"
// matches "s"). Rather than copy them, a reader sees whether any name it looks at has an
// upper-case ASCII letter or a byte over 0x7f, and if so hands the document to
// encoding/json (the *JSON functions). Replicas write these names in lower case; for names
// of lower-case ASCII, matching the lower-case field names exactly is the same test.

// scanStatus is how a fast read ended: read, no report (encoding/json fails or finds
// nothing), or hand the document to encoding/json.
type scanStatus int

const (
	scanRead scanStatus = iota
	scanNone
	scanFallBack
)

// memberName is a member's name as written (quoted) without its quotes, its escapes
// resolved; plain is false when it needs the case-insensitive rules (see above).
func memberName(quoted []byte) (name []byte, plain bool) {
	name = quoted[1 : len(quoted)-1]
	if bytes.IndexByte(name, '\\') >= 0 {
		name = []byte(jsonscan.Text(quoted))
	}
	for _, c := range name {
		if c >= 0x80 || ('A' <= c && c <= 'Z') {
			return name, false
		}
	}
	return name, true
}

// eachMember calls f with each member of obj, a valid object, by its plain name, until f
// returns other than scanRead; a name that is not plain is scanFallBack.
func eachMember(obj []byte, f func(name, value []byte) scanStatus) scanStatus {
	st := scanRead
	jsonscan.EachMember(obj, func(quoted, value []byte) bool {
		name, plain := memberName(quoted)
		if !plain {
			st = scanFallBack
		} else {
			st = f(name, value)
		}
		return st == scanRead
	})
	return st
}

// topObject reads doc as encoding/json's Unmarshal into a struct starts: scanRead when it
// is one valid JSON object (whitespace around it), else scanNone (Unmarshal fails, or for a
// null leaves the struct empty).
func topObject(doc []byte) scanStatus {
	end, err := jsonscan.Skip(doc, 0)
	if err != nil {
		return scanNone
	}
	for _, c := range doc[end:] {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' {
			return scanNone // more than one value
		}
	}
	if bytes.TrimLeft(doc, " \t\n\r")[0] != '{' {
		return scanNone
	}
	return scanRead
}

// usageVals is a usageJSON decoded without pointers: has says which counts were given.
type usageVals struct {
	n   [6]int
	has [6]bool
	set bool // the *usageJSON is non-nil
}

// usageFields are usageJSON's names, in usageVals' order.
var usageFields = [6]string{"prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
	"cache_read_input_tokens", "cache_creation_input_tokens"}

// decodeInto decodes raw, the value of a "usage" member, into u as encoding/json decodes it
// into a *usageJSON field.
func (u *usageVals) decodeInto(raw []byte) scanStatus {
	switch raw[0] {
	case 'n':
		*u = usageVals{}
		return scanRead
	case '{':
	default:
		return scanNone // a type error fails the whole document
	}
	if !u.set {
		*u = usageVals{set: true}
	}
	return eachMember(raw, func(name, value []byte) scanStatus {
		k := -1
		for i, f := range usageFields {
			if string(name) == f {
				k = i
				break
			}
		}
		if k < 0 {
			return scanRead
		}
		if value[0] == 'n' {
			u.has[k], u.n[k] = false, 0
			return scanRead
		}
		if c := value[0]; c != '-' && (c < '0' || c > '9') {
			return scanNone
		}
		n, err := strconv.ParseInt(string(value), 10, 64)
		if err != nil {
			return scanNone
		}
		u.has[k], u.n[k] = true, int(n)
		return scanRead
	})
}

// nestedInto decodes raw, the value of a "message" or "response" member, into u (that
// object's usage) as encoding/json decodes it into a *nested field; set is that pointer.
func nestedInto(raw []byte, set *bool, u *usageVals) scanStatus {
	switch raw[0] {
	case 'n':
		*set, *u = false, usageVals{}
		return scanRead
	case '{':
	default:
		return scanNone
	}
	if !*set {
		*set, *u = true, usageVals{}
	}
	return eachMember(raw, func(name, value []byte) scanStatus {
		if string(name) == "usage" {
			return u.decodeInto(value)
		}
		return scanRead
	})
}

// scanUsage is parseUsage's read of doc: the usage object that counts (the top-level one,
// else the message's, else the response's), or st saying why there is none.
func scanUsage(doc []byte) (u usageVals, st scanStatus) {
	if st = topObject(doc); st != scanRead {
		return u, st
	}
	var top, msg, resp usageVals
	var msgSet, respSet bool
	st = eachMember(doc, func(name, value []byte) scanStatus {
		switch string(name) {
		case "usage":
			return top.decodeInto(value)
		case "message":
			return nestedInto(value, &msgSet, &msg)
		case "response":
			return nestedInto(value, &respSet, &resp)
		}
		return scanRead
	})
	switch {
	case st != scanRead:
		return usageVals{}, st
	case top.set:
		return top, scanRead
	case msg.set:
		return msg, scanRead
	case resp.set:
		return resp, scanRead
	}
	return usageVals{}, scanNone
}

// usage is parseUsage's answer for u (see usageJSON.usage).
func (u *usageVals) usage() (Usage, bool, bool) {
	var uj usageJSON
	for i, p := range [6]**int{&uj.PromptTokens, &uj.CompletionTokens, &uj.InputTokens, &uj.OutputTokens,
		&uj.CacheRead, &uj.CacheCreation} {
		if u.has[i] {
			*p = &u.n[i]
		}
	}
	return uj.usage()
}

// scanUsageChunk is IsUsageChunk's read of data; fallBack asks for encoding/json's.
func scanUsageChunk(data []byte) (is, fallBack bool) {
	if topObject(data) != scanRead {
		return false, false
	}
	var choices, usage []byte
	st := eachMember(data, func(name, value []byte) scanStatus {
		switch string(name) {
		case "choices":
			switch value[0] {
			case 'n':
				choices = nil // a null resets the pointer
			case '[':
				choices = value
			default:
				return scanNone // a type error
			}
		case "usage":
			usage = value // a RawMessage takes any value
		}
		return scanRead
	})
	if st != scanRead {
		return false, st == scanFallBack
	}
	return emptyArray(choices) && usage != nil && usage[0] == '{', false
}

// emptyArray reports whether v, a valid value or nil, is an empty array.
func emptyArray(v []byte) bool {
	return len(v) > 0 && v[0] == '[' && len(bytes.TrimSpace(v[1:])) == 1
}

// scanEventType is tokenEvent's read of data: the top-level "type" string, st scanNone when
// encoding/json fails (or for a null), scanFallBack asking for encoding/json's read.
func scanEventType(data []byte) (typ []byte, st scanStatus) {
	if st = topObject(data); st != scanRead {
		return nil, st
	}
	st = eachMember(data, func(name, value []byte) scanStatus {
		if string(name) != "type" {
			return scanRead
		}
		switch value[0] {
		case 'n': // leaves the string as it was
		case '"':
			for _, c := range value {
				if c >= 0x80 {
					return scanFallBack // encoding/json replaces invalid UTF-8
				}
			}
			if bytes.IndexByte(value, '\\') >= 0 {
				typ = []byte(jsonscan.Text(value))
			} else {
				typ = value[1 : len(value)-1]
			}
		default:
			return scanNone
		}
		return scanRead
	})
	return typ, st
}
