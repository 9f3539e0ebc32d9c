package loadbench

import (
	"net"

	"github.com/gofiber/fiber/v2"
)

// Upstream is the application behind every system under test: a Fiber app
// answering each delivery 200 with a small JSON receipt.
type Upstream struct {
	app *fiber.App
	URL string
}

// StartUpstream serves on a free loopback port.
func StartUpstream() (*Upstream, error) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	receipt := []byte(`{"received":true,"status":"processed"}`)
	app.All("/*", func(c *fiber.Ctx) error {
		c.Set(fiber.HeaderContentType, fiber.MIMEApplicationJSON)
		return c.Send(receipt)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = app.Listener(ln) }()
	return &Upstream{app: app, URL: "http://" + ln.Addr().String()}, nil
}

// Close stops it.
func (u *Upstream) Close() error { return u.app.Shutdown() }
