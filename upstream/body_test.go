package upstream

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTokenCounterSSE(t *testing.T) {
	stream := "data: {\"a\":1}\n\n" +
		"event: ping\ndata:{\"b\":2}\n\n" +
		": comment with data: inside\n\n" +
		"data: {\"usage\":{}}\r\n\r\n" +
		"data: [DONE]\n\n"
	for _, chunk := range []int{1, 2, 3, 7, len(stream)} {
		var tc tokenCounter
		tc.init("text/event-stream; charset=utf-8")
		for i := 0; i < len(stream); i += chunk {
			tc.feed([]byte(stream[i:min(i+chunk, len(stream))]))
		}
		require.Equal(t, 3, tc.count(), "chunk size %d", chunk)
	}
}

func TestTokenCounterJSON(t *testing.T) {
	var tc tokenCounter
	tc.init("application/json")
	tc.feed([]byte(`{"usage":{"completion_`))
	tc.feed([]byte(`tokens":12}}`))
	require.Equal(t, 12, tc.count())

	var big tokenCounter
	big.init("application/json")
	big.feed([]byte(`{"usage":{"completion_tokens":3},"pad":"`))
	big.feed([]byte(strings.Repeat("x", maxUsageCapture)))
	require.Equal(t, 0, big.count(), "bodies over the cap are not kept")

	var plain tokenCounter
	plain.init("text/plain")
	plain.feed([]byte("data: x\n"))
	require.Equal(t, 0, plain.count())
}
