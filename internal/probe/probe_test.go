package probe

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestURL(t *testing.T) {
	for listen, want := range map[string]string{
		"0.0.0.0:8080":   "http://127.0.0.1:8080/healthz",
		":9000":          "http://127.0.0.1:9000/healthz",
		"[::]:8080":      "http://127.0.0.1:8080/healthz",
		"10.1.2.3:8080":  "http://10.1.2.3:8080/healthz",
		"[::1]:8080":     "http://[::1]:8080/healthz",
		"localhost:8080": "http://localhost:8080/healthz",
	} {
		got, err := URL(listen, "/healthz")
		require.NoError(t, err, listen)
		require.Equal(t, want, got, listen)
	}
	_, err := URL("8080", "/healthz")
	require.ErrorContains(t, err, `listen address "8080"`)
}

func TestCheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer ok.Close()
	require.NoError(t, Check(context.Background(), ok.URL+"/healthz"))
	err := Check(context.Background(), ok.URL+"/health")
	require.ErrorContains(t, err, "404")

	addr := strings.TrimPrefix(ok.URL, "http://")
	ok.Close()
	require.ErrorContains(t, Check(context.Background(), "http://"+addr+"/healthz"), "health check")
}
