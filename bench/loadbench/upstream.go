package loadbench

import (
	"net"
	"sync/atomic"

	"github.com/gofiber/fiber/v2"
)

// Upstream is the application behind every system under test: a Fiber app
// answering each delivery 200 with a small JSON receipt.
type Upstream struct {
	app      *fiber.App
	URL      string
	received atomic.Uint64
}

// StartUpstream serves on a free loopback port.
func StartUpstream() (*Upstream, error) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	u := &Upstream{app: app}
	receipt := []byte(`{"received":true,"status":"processed"}`)
	app.All("/*", func(c *fiber.Ctx) error {
		u.received.Add(1)
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(receipt)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = app.Listener(ln) }()
	u.URL = "http://" + ln.Addr().String()
	return u, nil
}

// Received is how many requests it has answered.
func (u *Upstream) Received() uint64 { return u.received.Load() }

// Close stops it.
func (u *Upstream) Close() error { return u.app.Shutdown() }
