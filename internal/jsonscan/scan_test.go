package jsonscan

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

var seeds = []string{
	`{}`, `[]`, `""`, `0`, `-0`, `1.5e+10`, `-12.25E-3`, `true`, `false`, `null`,
	`{"model":"a","messages":[{"role":"user","content":"hi\n\"there\"\u00e9\ud83d\ude00"}],"stream":true}`,
	` { "a" : [ 1 , 2 , { "b" : null } ] , "c" : "d" } `,
	`{"a":1,"a":2}`, `{"k\u0065y":"v"}`, `["\ud800", "\udc00\ud800x", "\ud83d\u0041"]`,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":tru}`, `{"a":"x`, `{"a":"\x"}`,
	`{"a":"\u12"}`, "{\"a\":\"tab\there\"}", `{"a" 1}`, `{"a":1,}`, `[1,]`, `[1 2]`, `{a:1}`,
	`{"a":1}}`, `{"a":1} x`, `nul`, `-`, `"\`, `[`, `{`, `{"a":[{"b":[{"c":{}}]}]}`,
	"\ufeff{}", `{"a":"\/\\\b\f\n\r\t"}`, `1 2`, `  `, ``,
}

// FuzzAgreesWithEncodingJSON holds the scanner to encoding/json: the same verdict on any
// bytes, the same members and elements of an object or array, the same text of a string.
func FuzzAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check(t, data)
		// Given what they should not be (a value not read before), the trusting readers
		// return nonsense but never panic.
		for _, m := range Members(data) {
			Text(m.Value)
		}
		for _, e := range Elements(data) {
			Text(e)
		}
		Text(data)
	})
}

func TestAgreesWithEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		check(t, []byte(s))
	}
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	check(t, []byte(deep))
	check(t, []byte("["+deep+"]"))
}

func check(t *testing.T, data []byte) {
	valid := json.Valid(data)
	require.Equal(t, valid, Valid(data), "Valid(%q)", data)
	if !valid {
		return
	}
	i := skipSpace(data, 0)
	switch data[i] {
	case '{':
		members, end, err := Object(data, 0)
		require.NoError(t, err)
		require.Equal(t, len(bytes.TrimRight(data, " \t\r\n")), end)
		want := decoderMembers(t, data)
		require.Len(t, members, len(want))
		require.Equal(t, members, Members(data), "Members agrees with Object on a valid object")
		k := 0
		EachMember(data, func(name, value []byte) bool {
			require.Less(t, k, len(members))
			require.Equal(t, string(data[members[k].NameStart:validStringEnd(data, members[k].NameStart)]), string(name), "EachMember's names are Object's, quoted")
			require.Equal(t, members[k].Name, Text(name))
			require.Equal(t, string(members[k].Value), string(value))
			k++
			return true
		})
		require.Equal(t, len(members), k, "EachMember visits every member")
		for k, m := range members {
			if utf8.Valid(data) { // encoding/json replaces invalid UTF-8; the gateway refuses it first
				require.Equal(t, want[k][0], m.Name)
			}
			require.Equal(t, want[k][1], string(m.Value))
			require.Equal(t, string(m.Value), string(data[m.Start:m.End]))
			require.Equal(t, byte('"'), data[m.NameStart])
			var name string
			require.NoError(t, json.Unmarshal(data[m.NameStart:validStringEnd(data, m.NameStart)], &name), "the name starts at NameStart")
			if utf8.Valid(data) {
				require.Equal(t, m.Name, name)
			}
		}
	case '[':
		elems, _, err := Array(data, 0)
		require.NoError(t, err)
		require.Equal(t, elems, Elements(data), "Elements agrees with Array on a valid array")
		var want []json.RawMessage
		require.NoError(t, json.Unmarshal(data, &want))
		require.Len(t, elems, len(want))
		for k := range elems {
			require.Equal(t, string(want[k]), string(elems[k]))
		}
		for _, e := range elems {
			checkString(t, e)
		}
	case '"':
		checkString(t, bytes.TrimSpace(data))
	default:
		_, _, err := Object(data, 0)
		require.ErrorIs(t, err, ErrNotObject)
		_, _, err = Array(data, 0)
		require.ErrorIs(t, err, ErrNotArray)
	}
}

// checkString: a string value decodes as encoding/json decodes it (for valid UTF-8, which
// encoding/json would otherwise replace and the gateway refuses before reading).
func checkString(t *testing.T, raw []byte) {
	if len(raw) == 0 || raw[0] != '"' || !utf8.Valid(raw) {
		return
	}
	var want string
	require.NoError(t, json.Unmarshal(raw, &want))
	got, ok := String(raw)
	require.True(t, ok)
	require.Equal(t, want, got, "String(%q)", raw)
	require.Equal(t, want, Text(raw), "Text(%q)", raw)
}

// decoderMembers is the object's members as encoding/json's Decoder reads them.
func decoderMembers(t *testing.T, data []byte) [][2]string {
	dec := json.NewDecoder(bytes.NewReader(data))
	_, err := dec.Token()
	require.NoError(t, err)
	var out [][2]string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		var raw json.RawMessage
		require.NoError(t, dec.Decode(&raw))
		out = append(out, [2]string{tok.(string), string(raw)})
	}
	return out
}

func TestErrorsSayWhere(t *testing.T) {
	_, err := Skip([]byte(`{"a": [1, 2,, 3]}`), 0)
	var se *SyntaxError
	require.ErrorAs(t, err, &se)
	require.Equal(t, 12, se.Offset)
	_, ok := String([]byte(`"abc`))
	require.False(t, ok)
	_, ok = String([]byte(`"a" `))
	require.False(t, ok)
}

// BenchmarkObject is a chat request with a message of 1 KB, 100 KB and 1 MB read by the
// scanner (members, then the message's text) against encoding/json's Decoder and Unmarshal.
func BenchmarkObject(b *testing.B) {
	for _, kb := range []int{1, 100, 1000} {
		msg := strings.Repeat("The quick brown fox jumps over the \"lazy\" dog.\n", kb*1024/48)
		body, _ := json.Marshal(map[string]any{"model": "auto", "stream": true,
			"messages": []map[string]string{{"role": "user", "content": msg}}})
		name := map[int]string{1: "1KB", 100: "100KB", 1000: "1MB"}[kb]
		b.Run(name+"/jsonscan", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				ms, _, err := Object(body, 0)
				if err != nil {
					b.Fatal(err)
				}
				for _, m := range ms {
					if m.Name == "messages" {
						mm := Members(Elements(m.Value)[0])
						Text(mm[1].Value)
					}
				}
			}
		})
		b.Run(name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var v struct {
					Messages []struct{ Role, Content string }
				}
				if err := json.Unmarshal(body, &v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestSpecial8 checks the word-at-a-time test against the byte table, every byte value in
// every position of a word of plain bytes.
func TestSpecial8(t *testing.T) {
	for pos := range 8 {
		for c := range 256 {
			w := []byte("abcdefgh")
			w[pos] = byte(c)
			want := false
			for _, b := range w {
				want = want || !plain[b]
			}
			require.Equal(t, want, special8(binary.LittleEndian.Uint64(w)), "byte %#x at %d", c, pos)
		}
	}
}
