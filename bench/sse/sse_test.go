package sse

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRead(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		events  int
		done    bool
		wantErr bool
	}{
		{"complete", "data: {\"a\":1}\n\ndata: {\"a\":2}\n\ndata: [DONE]\n\n", 2, true, false},
		{"no space after colon", "data:{}\n\ndata:[DONE]\n\n", 1, true, false},
		{"comments and other fields ignored", ": ping\nevent: x\ndata: {}\n\ndata: [DONE]\n\n", 1, true, false},
		{"cut before DONE", "data: {}\n\ndata: {}\n\n", 2, false, false},
		{"empty", "", 0, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, err := Read(strings.NewReader(tt.body), time.Now())
			require.NoError(t, err)
			require.Equal(t, tt.events, st.Events)
			require.Equal(t, tt.done, st.Done)
			if tt.events > 0 {
				require.Positive(t, st.TTFT)
				require.GreaterOrEqual(t, st.E2E, st.TTFT)
			}
		})
	}
}

func TestReadReadError(t *testing.T) {
	boom := errors.New("boom")
	r := io.MultiReader(strings.NewReader("data: {}\n\n"), iotest.ErrReader(boom))
	st, err := Read(r, time.Now())
	require.ErrorIs(t, err, boom)
	require.Equal(t, 1, st.Events)
}
