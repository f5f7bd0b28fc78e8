package sse

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"time"
)

// Timing is what a client sees of one SSE answer.
type Timing struct {
	TTFT   time.Duration // start → first "data:" event that is not [DONE]
	E2E    time.Duration // start → [DONE] (or the end of the body)
	Events int           // data events before [DONE]
	Done   bool          // [DONE] was received
}

// Read reads an SSE body to its end, timing events from start. A body
// that ends without [DONE] is not an error (Done reports it); a read error
// is. After [DONE] the rest of the body is read and discarded, so the
// connection can be reused; closing body is the caller's job.
func Read(body io.Reader, start time.Time) (Timing, error) {
	var st Timing
	br := bufio.NewReaderSize(body, 16<<10)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if rest, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				payload := bytes.TrimSpace(rest)
				if bytes.Equal(payload, []byte("[DONE]")) {
					st.Done = true
					st.E2E = time.Since(start)
					io.Copy(io.Discard, br)
					return st, nil
				}
				if st.Events == 0 {
					st.TTFT = time.Since(start)
				}
				st.Events++
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			st.E2E = time.Since(start)
			return st, nil
		default:
			st.E2E = time.Since(start)
			return st, fmt.Errorf("read stream: %w", err)
		}
	}
}
