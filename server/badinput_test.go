package server

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBadInputIsA4xxNamingTheProblem sends every kind of bad request to a real listener and
// requires a 4xx with an OpenAI-shaped JSON error that names the problem, and nothing sent
// upstream.
func TestBadInputIsA4xxNamingTheProblem(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) {
		c.Server.BodyLimit = 4096
		c.Server.MaxTextBytes = 100
		c.Server.MaxBatchTexts = 3
	})
	type tc struct {
		name, method, path, ctype, body string
		status                          int
		param                           string // "" = don't check
		msg                             string // substring of the message
	}
	cases := []tc{
		{"invalid json", "POST", "/v1/query-process", "application/json", `{"text": "x"`, 400, "", "invalid JSON"},
		{"not an object", "POST", "/v1/query-process", "application/json", `["x"]`, 400, "", "must be a JSON object, got an array"},
		{"empty body", "POST", "/v1/query-process", "application/json", ``, 400, "", "body is empty"},
		{"missing text", "POST", "/v1/query-process", "application/json", `{}`, 400, "text", "text: required"},
		{"null text", "POST", "/v1/query-process", "application/json", `{"text": null}`, 400, "text", "must be a string, got null"},
		{"number text", "POST", "/v1/query-process", "application/json", `{"text": 42}`, 400, "text", "must be a string, got a number"},
		{"empty text", "POST", "/v1/query-process", "application/json", `{"text": " \n\t "}`, 400, "text", "must not be empty"},
		{"non-string context", "POST", "/v1/query-process", "application/json", `{"text": "x", "context": ["y"]}`, 400, "context", "must be a string"},
		{"unknown field", "POST", "/v1/query-process", "application/json", `{"text": "x", "txt": "y"}`, 400, "txt", "unknown field"},
		{"trailing data", "POST", "/v1/query-process", "application/json", `{"text": "x"} {}`, 400, "", "after the JSON object"},
		{"invalid utf-8", "POST", "/v1/query-process", "application/json", "{\"text\": \"\xff\xfe\"}", 400, "", "not valid UTF-8"},
		{"form content type", "POST", "/v1/query-process", "application/x-www-form-urlencoded", `text=x`, 415, "", "Content-Type must be application/json"},
		{"text/plain", "POST", "/v1/classify", "text/plain", `{"text":"x"}`, 415, "", "Content-Type"},
		{"body too large", "POST", "/v1/query-process", "application/json", `{"text": "` + strings.Repeat("a", 5000) + `"}`, 413, "", "server.body_limit"},
		{"unknown route", "GET", "/v1/nope", "", ``, 404, "", "no route for GET /v1/nope"},
		{"wrong method", "GET", "/v1/query-process", "", ``, 405, "", "method GET not allowed on /v1/query-process (allowed: POST)"},
		{"wrong method 2", "DELETE", "/v1/models", "", ``, 405, "", "allowed: GET"},
		{"admin route needs token", "POST", "/admin/reload", "application/json", `{}`, 401, "", "Bearer"},
		{"classify neither", "POST", "/v1/classify", "application/json", `{}`, 400, "text", "one is required"},
		{"classify both", "POST", "/v1/classify", "application/json", `{"text":"a","texts":["b"]}`, 400, "texts", "not both"},
		{"classify texts not array", "POST", "/v1/classify", "application/json", `{"texts":"a"}`, 400, "texts", "must be an array, got a string"},
		{"classify texts empty", "POST", "/v1/classify", "application/json", `{"texts":[]}`, 400, "texts", "must not be empty"},
		{"classify too many", "POST", "/v1/classify", "application/json", `{"texts":["a","b","c","d"]}`, 400, "texts", "at most 3 items"},
		{"classify bad item", "POST", "/v1/classify", "application/json", `{"texts":["a", 5]}`, 400, "texts[1]", "must be a string or an object"},
		{"classify empty item", "POST", "/v1/classify", "application/json", `{"texts":["a", {"text": ""}]}`, 400, "texts[1].text", "must not be empty"},
		{"classify item unknown field", "POST", "/v1/classify", "application/json", `{"texts":[{"text": "a", "ctx": "b"}]}`, 400, "texts[0].ctx", "unknown field"},
		{"classify context with texts", "POST", "/v1/classify", "application/json", `{"texts":["a"], "context": "b"}`, 400, "context", "not allowed with texts"},
		{"chat no messages", "POST", "/v1/chat/completions", "application/json", `{"model":"x"}`, 400, "messages", "messages: required"},
		{"chat messages not array", "POST", "/v1/chat/completions", "application/json", `{"messages":{}}`, 400, "messages", "must be an array"},
		{"chat empty messages", "POST", "/v1/chat/completions", "application/json", `{"messages":[]}`, 400, "messages", "at least one"},
		{"chat no user", "POST", "/v1/chat/completions", "application/json", `{"messages":[{"role":"system","content":"be nice"}]}`, 400, "messages", "no user message"},
		{"chat no role", "POST", "/v1/chat/completions", "application/json", `{"messages":[{"content":"hi"}]}`, 400, "messages[0].role", "required"},
		{"chat bad content", "POST", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":7}]}`, 400, "messages[0].content", "must be a string or an array"},
		{"chat part without text", "POST", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":[{"type":"text"}]}]}`, 400, "messages[0].content[0].text", "required"},
		// An image alone is not bad input: routing.fallback places it (TestNoTextRoutedByFallback).
		{"chat empty text", "POST", "/v1/chat/completions", "application/json", `{"messages":[{"role":"user","content":[{"type":"text","text":" "}]}]}`, 400, "messages[0].content", "must not be empty"},
		{"chat stream not bool", "POST", "/v1/chat/completions", "application/json", `{"stream":"yes","messages":[{"role":"user","content":"hi"}]}`, 400, "stream", "must be a boolean"},
		{"chat user not string", "POST", "/v1/chat/completions", "application/json", `{"user":1,"messages":[{"role":"user","content":"hi"}]}`, 400, "user", "must be a string"},
		{"completion no prompt", "POST", "/v1/completions", "application/json", `{"model":"x"}`, 400, "prompt", "prompt: required"},
		{"completion token prompt", "POST", "/v1/completions", "application/json", `{"prompt":[1,2,3]}`, 400, "prompt", "token arrays are not supported"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := do(t, c.method, ts.url+c.path, c.ctype, []byte(c.body))
			require.Equal(t, c.status, resp.StatusCode, "%s", body)
			require.Contains(t, resp.Header.Get("Content-Type"), "application/json")
			e := apiErr(t, body)
			require.Contains(t, e.Message, c.msg)
			if c.param != "" {
				require.NotNil(t, e.Param, "param must name the field")
				require.Equal(t, c.param, *e.Param)
			}
		})
	}
	require.Empty(t, ts.fast.requests())
	require.Empty(t, ts.slow.requests())
}

func TestCompressedBodyIs415(t *testing.T) {
	ts := startServer(t)
	resp, body := do(t, http.MethodPost, ts.url+"/v1/query-process", "application/json", []byte("\x1f\x8b\x08"), "Content-Encoding", "gzip")
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	require.Contains(t, apiErr(t, body).Message, "Content-Encoding")
}

func TestUnknownMethodIsAJSON405(t *testing.T) {
	ts := startServer(t)
	resp, body := do(t, "BREW", ts.url+"/v1/query-process", "", nil)
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)
	require.Contains(t, apiErr(t, body).Message, `"BREW"`)
}

func TestMalformedHTTPIsA4xx(t *testing.T) {
	ts := startServer(t)
	conn, err := net.Dial("tcp", strings.TrimPrefix(ts.url, "http://"))
	require.NoError(t, err)
	defer conn.Close()
	// A header line without a colon.
	fmt.Fprintf(conn, "POST /v1/query-process HTTP/1.1\r\nHost: x\r\nbroken header\r\nContent-Length: 2\r\n\r\n{}")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.GreaterOrEqual(t, resp.StatusCode, 400)
	require.Less(t, resp.StatusCode, 500)
}

func TestAdminRoutesDoNotExistWithoutAToken(t *testing.T) {
	ts := startServer(t, func(c *gatewayConfig, _ *testOptions) { c.Admin.Token = "" })
	for _, p := range []string{"/admin/reload", "/admin/drain", "/admin/undrain"} {
		resp, body := postJSON(t, ts.url+p, `{}`, "Authorization", "Bearer "+testToken)
		require.Equal(t, http.StatusNotFound, resp.StatusCode, p)
		apiErr(t, body)
	}
	resp, _ := do(t, http.MethodGet, ts.url+"/admin/status", "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func TestAdminTokenIsChecked(t *testing.T) {
	ts := startServer(t)
	for _, auth := range []string{"", "Bearer ", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + "x", "Bearer" + testToken} {
		resp, body := do(t, http.MethodGet, ts.url+"/admin/status", "", nil, "Authorization", auth)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, auth)
		require.Equal(t, `Bearer realm="triage-admin"`, resp.Header.Get("WWW-Authenticate"))
		require.Equal(t, "authentication_error", apiErr(t, body).Type)
	}
	// The scheme is case-insensitive (RFC 9110 11.1).
	for _, scheme := range []string{"bearer ", "BEARER ", "Bearer  "} {
		resp, body := do(t, http.MethodGet, ts.url+"/admin/status", "", nil, "Authorization", scheme+testToken)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%q: %s", scheme, body)
	}
	resp, body := do(t, http.MethodGet, ts.url+"/admin/status", "", nil, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	for _, want := range []string{`"model_version":"v1"`, `"slow_path":{"active":0,"max":50,"load":0,"threshold":0.5,"share":0,"share_requests":0,"share_max":0,"share_unit":"requests","budget_threshold":0}`, `"id":"fast-0"`, `"id":"slow-0"`, `"ready":true`} {
		require.Contains(t, string(body), want)
	}

	resp, body = postJSON(t, ts.url+"/admin/drain", `{"pool":"medium","replica":"x"}`, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "pool", *apiErr(t, body).Param)
	resp, body = postJSON(t, ts.url+"/admin/drain", `{"pool":"fast","replica":"nope"}`, "Authorization", "Bearer "+testToken)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Contains(t, apiErr(t, body).Message, "nope")
}

// Field names match exactly, as the replicas match them: encoding/json alone would read
// "MESSAGES" as messages, so the gateway would classify (and route by) a text the replica
// never reads. Case variants of the fields the gateway reads, and duplicates of them, are
// 400s naming the field; nothing reaches a replica.
func TestFieldNamesAreCaseSensitive(t *testing.T) {
	ts := startServer(t)
	cases := []struct {
		name, path, body, code, param string
	}{
		{"upper-case messages only", "/v1/chat/completions", `{"MESSAGES":[{"role":"user","content":"p=0.9"}]}`, "field_case", "messages"},
		{"both spellings", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi p=0.1"}],"Messages":[{"role":"user","content":"p=0.9"}]}`, "field_case", "messages"},
		{"duplicate messages", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hi p=0.1"}],"messages":[{"role":"user","content":"p=0.9"}]}`, "duplicate_field", "messages"},
		{"message content case", "/v1/chat/completions", `{"messages":[{"role":"user","Content":"p=0.9","content":"hi"}]}`, "field_case", "messages[0].content"},
		{"part text case", "/v1/chat/completions", `{"messages":[{"role":"user","content":[{"type":"text","TEXT":"p=0.9","text":"hi"}]}]}`, "field_case", "messages[0].content[0].text"},
		{"model case", "/v1/chat/completions", `{"MODEL":"big","messages":[{"role":"user","content":"hi"}]}`, "field_case", "model"},
		{"prompt case", "/v1/completions", `{"Prompt":"p=0.9","prompt":"hi"}`, "field_case", "prompt"},
		{"query-process TEXT", "/v1/query-process", `{"TEXT":"p=0.9"}`, "field_case", "text"},
		{"classify item Context", "/v1/classify", `{"texts":[{"text":"a","Context":"b"}]}`, "field_case", "texts[0].context"},
		{"duplicate text", "/v1/query-process", `{"text":"a","text":"b"}`, "duplicate_field", "text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := postJSON(t, ts.url+c.path, c.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
			e := apiErr(t, body)
			require.Equal(t, c.code, *e.Code)
			require.Equal(t, c.param, *e.Param)
		})
	}
	require.Empty(t, ts.fast.requests())
	require.Empty(t, ts.slow.requests())
	// Unknown fields of the OpenAI requests still pass through, whatever their case.
	resp, body := postJSON(t, ts.url+"/v1/chat/completions", `{"messages":[{"role":"user","content":"hi","Name":"x"}],"Temperature":0.3}`)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
}

// Error messages quote client input only up to a bound: a 200 KB unknown key is not echoed.
func TestErrorsDoNotEchoHugeInput(t *testing.T) {
	ts := startServer(t)
	huge := strings.Repeat("k", 200_000)
	resp, body := postJSON(t, ts.url+"/v1/query-process", `{"text":"x","`+huge+`":1}`)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Less(t, len(body), 1024, "the answer is not the key")
	e := apiErr(t, body)
	require.Equal(t, "unknown_field", *e.Code)
	require.Contains(t, e.Message, "(200000 bytes)")

	resp, body = do(t, http.MethodPost, ts.url+"/v1/query-process", "application/"+strings.Repeat("x", 10_000), []byte(`{}`))
	require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
	require.Less(t, len(body), 1024)
	resp, body = do(t, http.MethodGet, ts.url+"/"+strings.Repeat("p", 10_000), "", nil)
	require.Equal(t, http.StatusNotFound, resp.StatusCode)
	require.Less(t, len(body), 1024)
}
