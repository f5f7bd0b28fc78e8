package upstream

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRewriteModel(t *testing.T) {
	tests := []struct {
		name, in, model, want string
	}{
		{"replaces only the value",
			`{"model":"auto","messages":[{"role":"user","content":"hi"}],"temperature":0.70}`, "m",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":0.70}`},
		{"keeps whitespace, order and number spelling",
			"{\n  \"stream\" : true,\n  \"model\" :  \"auto\" ,\n  \"n\": 1e3,\n  \"big\": 12345678901234567890\n}", "m",
			"{\n  \"stream\" : true,\n  \"model\" :  \"m\" ,\n  \"n\": 1e3,\n  \"big\": 12345678901234567890\n}"},
		{"nested model keys are untouched",
			`{"tools":[{"model":"keep"}],"model":"auto","meta":{"model":"keep"}}`, "m",
			`{"tools":[{"model":"keep"}],"model":"m","meta":{"model":"keep"}}`},
		{"non-string model value",
			`{"model":null,"x":1}`, "m", `{"model":"m","x":1}`},
		{"object model value",
			`{"model":{"a":[1,{"b":2}]},"x":1}`, "m", `{"model":"m","x":1}`},
		{"inserted when absent",
			`{"prompt":"p"}`, "m", `{"model":"m","prompt":"p"}`},
		{"inserted into an empty object",
			` { } `, "m", ` {"model":"m" } `},
		{"duplicates all replaced",
			`{"model":"a","model":"b"}`, "m", `{"model":"m","model":"m"}`},
		{"escaped key",
			`{"mod\u0065l":"a"}`, "m", `{"mod\u0065l":"m"}`},
		{"model name is JSON-escaped",
			`{"model":"a"}`, "we\"ird<&>", `{"model":"we\"ird<&>"}`},
		{"unicode elsewhere is kept",
			`{"model":"a","content":"héllo \u00e9 🙂"}`, "m", `{"model":"m","content":"héllo \u00e9 🙂"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := RewriteModel([]byte(tt.in), tt.model)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
			var v map[string]any
			require.NoError(t, json.Unmarshal(got, &v))
			require.Equal(t, tt.model, v["model"])
		})
	}

	for _, bad := range []string{``, `[]`, `"s"`, `{"a":1`, `{"a":1} {"b":2}`, `{"a":1}x`, `{"a":tru}`, `{"model":"a",}`} {
		t.Run("invalid "+bad, func(t *testing.T) {
			_, err := RewriteModel([]byte(bad), "m")
			require.ErrorIs(t, err, ErrInvalidBody)
		})
	}
}
