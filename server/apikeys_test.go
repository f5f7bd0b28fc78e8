package server

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/triage-gw/triage/router"
)

const (
	keyA = "sk-test-team-a-0123456789abcdef"
	keyB = "sk-test-team-b-0123456789abcdef"
	keyC = "sk-test-team-c-0123456789abcdef"
)

func digest(key string) string {
	d := sha256.Sum256([]byte(key))
	return hex.EncodeToString(d[:])
}

// writeKeys writes a keys file; entries are "name=key" or "name=key:capacity".
func writeKeys(t *testing.T, path string, entries ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("keys:\n")
	for _, e := range entries {
		name, rest, _ := strings.Cut(e, "=")
		key, capacity, limited := strings.Cut(rest, ":")
		fmt.Fprintf(&b, "  - name: %s\n    sha256: %s\n", name, digest(key))
		if limited {
			fmt.Fprintf(&b, "    token_bucket: {capacity: %s, refill_per_second: 0.001}\n", capacity)
		}
	}
	// Written aside and renamed, as a Kubernetes Secret volume swaps its files.
	tmp := path + ".tmp"
	require.NoError(t, os.WriteFile(tmp, []byte(b.String()), 0o600))
	require.NoError(t, os.Rename(tmp, path))
}

func withKeys(path string, interval time.Duration) serverOption {
	return func(c *gatewayConfig, _ *testOptions) {
		c.Auth.KeysFile = path
		c.Auth.ReloadInterval = interval
	}
}

// TestAPIKeys: with auth.keys_file set, every /v1/ endpoint needs a configured key (401 in
// the OpenAI shape otherwise, before the body is read), probes and metrics do not, a key's
// token bucket answers 429 with Retry-After, the client's Authorization never reaches a
// replica, and metrics name keys by their configured names only.
func TestAPIKeys(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "team-a="+keyA, "team-b="+keyB+":30")
	ts := startServer(t, withKeys(path, 0))
	chat := `{"messages":[{"role":"user","content":"hi p=0.1"}]}`

	for _, path := range []string{"/v1/chat/completions", "/v1/completions", "/v1/classify", "/v1/query-process"} {
		resp, body := postJSON(t, ts.url+path, `{}`)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
		require.Equal(t, "missing_api_key", *apiErr(t, body).Code)
		require.Equal(t, `Bearer realm="triage"`, resp.Header.Get("WWW-Authenticate"))
	}
	resp, body := do(t, http.MethodGet, ts.url+"/v1/models", "", nil)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s", body)
	for _, auth := range []string{"Bearer " + keyC, "Bearer short", "Basic " + keyA, keyA, "Bearer " + keyA + "x"} {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat, "Authorization", auth)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, auth)
		e := apiErr(t, body)
		require.Equal(t, "invalid_api_key", *e.Code)
		require.Equal(t, typeAuthentication, e.Type)
		require.NotContains(t, string(body), keyA)
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		resp, _ := do(t, http.MethodGet, ts.url+p, "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, p)
	}
	require.Empty(t, ts.fast.requests(), "nothing unauthenticated reached a replica")

	resp, body = postJSON(t, ts.url+"/v1/chat/completions", chat, "Authorization", "Bearer "+keyA, "Cookie", "c=1")
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	resp, _ = do(t, http.MethodGet, ts.url+"/v1/models", "", nil, "Authorization", "bearer "+keyA)
	require.Equal(t, http.StatusOK, resp.StatusCode, "the scheme in any case")
	reqs := ts.fast.requests()
	require.Len(t, reqs, 1)
	require.Empty(t, reqs[0].header.Get("Authorization"), "the client's key is not forwarded")
	require.Empty(t, reqs[0].header.Get("Cookie"))
	for k, vs := range reqs[0].header {
		require.NotContains(t, strings.Join(vs, " "), keyA, "header %s", k)
	}

	// team-b's bucket holds 30 estimated tokens (body bytes / 4): the 51-byte chat costs 12.
	for range 2 {
		resp, body := postJSON(t, ts.url+"/v1/chat/completions", chat, "Authorization", "Bearer "+keyB)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	}
	resp, body = postJSON(t, ts.url+"/v1/chat/completions", chat, "Authorization", "Bearer "+keyB)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s", body)
	require.Equal(t, "key_rate_limited", *apiErr(t, body).Code)
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	resp, _ = postJSON(t, ts.url+"/v1/chat/completions", chat, "Authorization", "Bearer "+keyA)
	require.Equal(t, http.StatusOK, resp.StatusCode, "another key is not limited by it")

	_, metrics := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
	m := string(metrics)
	for _, want := range []string{
		`triage_auth_requests_total{key="team-a",outcome="ok"} 3`,
		`triage_auth_requests_total{key="team-b",outcome="ok"} 2`,
		`triage_auth_requests_total{key="team-b",outcome="rate_limited"} 1`,
		`triage_auth_requests_total{key="none",outcome="missing"} 5`,
		`triage_auth_requests_total{key="none",outcome="invalid"} 5`,
		`triage_auth_keys 2`,
	} {
		require.Contains(t, m, want)
	}
	require.NotContains(t, m, keyA)
	require.NotContains(t, m, digest(keyA))
}

// TestAPIKeysReload: a changed keys file replaces the keys at the next interval; one that does
// not parse is counted and logged, and the previous keys keep working.
func TestAPIKeysReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.yaml")
	writeKeys(t, path, "team-a="+keyA)
	ts := startServer(t, withKeys(path, 10*time.Millisecond))
	chat := `{"messages":[{"role":"user","content":"hi p=0.1"}]}`
	status := func(key string) int {
		resp, _ := postJSON(t, ts.url+"/v1/chat/completions", chat, "Authorization", "Bearer "+key)
		return resp.StatusCode
	}
	require.Equal(t, http.StatusOK, status(keyA))
	require.Equal(t, http.StatusUnauthorized, status(keyB))

	writeKeys(t, path, "team-b="+keyB)
	eventually(t, func() bool { return status(keyB) == http.StatusOK }, "the new key is taken")
	require.Equal(t, http.StatusUnauthorized, status(keyA), "the removed key is refused")

	require.NoError(t, os.WriteFile(path, []byte("keys: [{name: x, sha256: nothex}]\n"), 0o600))
	eventually(t, func() bool {
		_, m := do(t, http.MethodGet, ts.url+"/metrics", "", nil)
		return strings.Contains(string(m), `triage_auth_reloads_total{result="error"} 1`)
	}, "the broken file is noticed")
	require.Equal(t, http.StatusOK, status(keyB), "the previous keys stay")
}

func TestKeysFileIsValidated(t *testing.T) {
	d := digest(keyA)
	for _, tc := range []struct{ file, want string }{
		{"keys: []", "lists no keys"},
		{"", "keys file"},
		{"keys: [{name: a, sha256: " + d + ", extra: 1}]", "field extra not found"},
		{"keys: [{name: a, sha256: abc}]", "keys[0]: sha256: must be the 64 hex digits"},
		{"keys: [{name: '', sha256: " + d + "}]", "keys[0]: name: must be 1 to 64"},
		{"keys: [{name: 'a b', sha256: " + d + "}]", "keys[0]: name: must be"},
		{"keys: [{name: a, sha256: " + d + "}, {name: a, sha256: " + digest(keyB) + "}]", `keys[1]: name: "a" is given twice`},
		{"keys: [{name: a, sha256: " + d + "}, {name: b, sha256: " + strings.ToUpper(d) + "}]", `keys[1]: sha256: the same key as "a"`},
		{"keys: [{name: a, sha256: " + d + ", token_bucket: {capacity: 0, refill_per_second: 1}}]", "token_bucket.capacity: must be a finite number > 0"},
	} {
		_, err := parseKeys([]byte(tc.file), nil)
		require.ErrorContains(t, err, tc.want, tc.file)
	}
	ks, err := parseKeys([]byte("keys: [{name: a, sha256: "+d+"}]"), nil)
	require.NoError(t, err)
	require.Len(t, ks.byName, 1)
}

func TestMissingKeysFileStopsStartup(t *testing.T) {
	cfg := testConfig([]string{"http://127.0.0.1:1"}, []string{"http://127.0.0.1:2"})
	cfg.Auth.KeysFile = filepath.Join(t.TempDir(), "absent.yaml")
	_, err := build(cfg, testOptions{load: func() (router.Model, error) { return newFakeModel("v1"), nil }}, nil)
	require.ErrorContains(t, err, "auth.keys_file")
}

func FuzzParseKeys(f *testing.F) {
	f.Add([]byte("keys: [{name: a, sha256: " + digest(keyA) + "}]"))
	f.Add([]byte("keys:\n  - name: team-b\n    sha256: " + digest(keyB) + "\n    token_bucket: {capacity: 10, refill_per_second: 1}\n"))
	f.Add([]byte("keys: [{name: a, sha256: abc}, {name: a}]"))
	f.Add([]byte("{keys: 1}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ks, err := parseKeys(data, nil)
		if err != nil {
			return
		}
		require.NotEmpty(t, ks.byName)
		require.LessOrEqual(t, len(ks.byName), maxKeys)
		require.Len(t, ks.byDigest, len(ks.byName))
		for name, k := range ks.byName {
			require.Regexp(t, keyNameRE, name, "names label metrics: only the allowed characters")
			require.Equal(t, name, k.name)
		}
	})
}
