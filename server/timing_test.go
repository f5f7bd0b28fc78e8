package server

import (
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/stretchr/testify/require"
	"github.com/valyala/fasthttp"

	"github.com/triage-gw/triage/classifier"
	"github.com/triage-gw/triage/router"
)

func TestServerTimingFormat(t *testing.T) {
	app := fiber.New()
	c := app.AcquireCtx(&fasthttp.RequestCtx{})
	defer app.ReleaseCtx(c)
	r := &router.Route{DecideTime: 7 * time.Microsecond}
	r.Hit, r.Shared, r.Stage = true, true, classifier.StageStatic
	r.CacheTime, r.Static, r.Queue, r.Inference = 22*time.Microsecond, 1500*time.Microsecond, 0, 12345678*time.Nanosecond
	setServerTiming(c, r)
	require.Equal(t, `cache;desc="hit-shared";dur=0.022, static;dur=1.500, queue;dur=0.000, inference;dur=12.346, decision;dur=0.007, stage;desc="static"`,
		string(c.Response().Header.Peek(fiber.HeaderServerTiming)))
	r.Shared, r.Hit, r.Stage = false, false, classifier.StageEncoder
	setServerTiming(c, r)
	require.Equal(t, `cache;desc="miss";dur=0.022, static;dur=1.500, queue;dur=0.000, inference;dur=12.346, decision;dur=0.007, stage;desc="encoder"`,
		string(c.Response().Header.Peek(fiber.HeaderServerTiming)))
}
