package upstream

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// ErrInvalidRequest is wrapped by every error that says a request cannot be
// sent to any replica as it is (a header value HTTP forbids, a bad method).
// It is the caller's fault: it is returned before any replica is picked, it
// is never retried and it never counts against a replica's health.
var ErrInvalidRequest = errors.New("request cannot be sent upstream")

// HeaderError names a request header that HTTP does not allow to be sent.
// It wraps ErrInvalidRequest.
type HeaderError struct {
	Name string
	// Offset and Byte locate the first forbidden byte of the value; Offset is
	// -1 when the name itself is invalid.
	Offset int
	Byte   byte
}

func (e *HeaderError) Error() string {
	if e.Offset < 0 {
		return fmt.Sprintf("header name %q is not an RFC 9110 token", e.Name)
	}
	return fmt.Sprintf("header %s: byte 0x%02x at offset %d is a control character, which RFC 9110 does not allow in a field value",
		e.Name, e.Byte, e.Offset)
}

func (e *HeaderError) Unwrap() error { return ErrInvalidRequest }

// CheckHeader returns a *HeaderError when name is not an RFC 9110 token or
// value holds a byte that RFC 9110 does not allow in a field value: a control
// character (0x00–0x1F, 0x7F) other than horizontal tab. Visible ASCII, space,
// tab and obs-text (0x80–0xFF) pass. These are exactly the values net/http's
// client refuses to send, so a request that passes is never refused by the
// transport for its headers.
func CheckHeader(name, value string) error {
	if !validHeaderName(name) {
		return &HeaderError{Name: name, Offset: -1}
	}
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return &HeaderError{Name: name, Offset: i, Byte: c}
		}
	}
	return nil
}

// checkHeaders runs CheckHeader over every value of h.
func checkHeaders(h http.Header) error {
	for k, vs := range h {
		for _, v := range vs {
			if err := CheckHeader(k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// validHeaderName reports whether s is an RFC 9110 token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// hopHeaders are meaningful for one connection only (RFC 9110 7.6.1).
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// forwardHeader is the header of an upstream request built from the
// caller's: a copy without hop-by-hop headers, Host and Content-Length.
func forwardHeader(in http.Header) http.Header {
	h := in.Clone()
	if h == nil {
		h = make(http.Header)
	}
	removeHopByHop(h)
	h.Del("Host")
	h.Del("Content-Length")
	return h
}

func removeHopByHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for name := range strings.SplitSeq(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}
