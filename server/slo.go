package server

import (
	"strconv"
	"time"

	"github.com/gofiber/fiber/v2"
)

// HeaderSLOTTFT carries a request's time-to-first-token target in whole milliseconds, for
// the SLO replica policies (slo, slo-least-load, slo-pack-load; other policies ignore it).
// It is the gateway's own: like every header not on the forwarding allowlist, it never
// reaches a replica.
const HeaderSLOTTFT = "x-slo-ttft-ms"

// maxSLOTTFTMillis is the largest target accepted: 10 minutes, the bound of the pools' own
// slo.ttft_target.
const maxSLOTTFTMillis = 600_000

// sloTarget reads the request's TTFT target: 0 when the header is absent (the pool's
// slo.ttft_target applies), a 400 naming the header when it is not an integer number of
// milliseconds in [1, 600000].
func sloTarget(c *fiber.Ctx) (time.Duration, error) {
	v := c.Get(HeaderSLOTTFT)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxSLOTTFTMillis {
		return 0, badRequest("invalid_header", HeaderSLOTTFT,
			"%s: must be an integer number of milliseconds in [1, %d], got %s", HeaderSLOTTFT, maxSLOTTFTMillis, clip(v))
	}
	return time.Duration(n) * time.Millisecond, nil
}
