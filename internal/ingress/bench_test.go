package ingress

import (
	"testing"

	"github.com/gofiber/fiber/v2"
	"github.com/valyala/fasthttp"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// BenchmarkReplayAnswer is the replay write path: a recorded answer (status,
// one kept header, a small JSON body) written onto the response with
// Hookstamp-Outcome and Idempotent-Replayed.
func BenchmarkReplayAnswer(b *testing.B) {
	app := fiber.New()
	var rc fasthttp.RequestCtx
	c := app.AcquireCtx(&rc)
	defer app.ReleaseCtx(c)
	res := &idempotency.Result{Outcome: idempotency.Replayed, Replay: &idempotency.Response{
		Status: 200, Headers: map[string]string{"Content-Type": "application/json"},
		Body: []byte(`{"received":true,"status":"processed"}`),
	}}
	b.ReportAllocs()
	for b.Loop() {
		rc.Response.Reset()
		if err := answer(c, res); err != nil {
			b.Fatal(err)
		}
	}
	if string(rc.Response.Header.Peek(HeaderReplayed)) != "true" || rc.Response.StatusCode() != 200 {
		b.Fatalf("replay answer: %s", rc.Response.Header.String())
	}
}
