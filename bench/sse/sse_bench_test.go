package sse

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// BenchmarkRead measures the reader's own cost per event, which a TTFT
// measured through it includes.
func BenchmarkRead(b *testing.B) {
	var sb strings.Builder
	const events = 64
	for i := range events {
		fmt.Fprintf(&sb, "data: {\"id\":\"chatcmpl-1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"tok%d \"}}]}\n\n", i)
	}
	sb.WriteString("data: [DONE]\n\n")
	body := sb.String()
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		st, err := Read(strings.NewReader(body), time.Now())
		if err != nil || st.Events != events {
			b.Fatalf("events %d, err %v", st.Events, err)
		}
	}
	b.ReportMetric(float64(b.N*events)/b.Elapsed().Seconds(), "events/s")
}
