// Package fiberidem is the benchmark's F1 peer: what a hookstamp user
// could run instead, a Fiber v2 app with Fiber's own idempotency
// middleware (middleware/idempotency) keeping answers in Redis
// (github.com/gofiber/storage/redis) and forwarding first deliveries to
// the upstream with middleware/proxy.
package fiberidem

import (
	"errors"
	"net"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/idempotency"
	"github.com/gofiber/fiber/v2/middleware/proxy"
	"github.com/gofiber/storage/redis/v3"
	"github.com/valyala/fasthttp"
)

// Options configure the app.
type Options struct {
	Upstream  string // base URL; deliveries go to Upstream + "/hook"
	RedisAddr string // host:port
	Prefix    string // starts every key it writes, for the run's cleanup
	KeyHeader string // the idempotency key's header
	Lifetime  time.Duration
}

// App is the running peer.
type App struct {
	app     *fiber.App
	storage *redis.Storage
}

// Start serves on ln.
func Start(ln net.Listener, o Options) (*App, error) {
	host, port, err := splitAddr(o.RedisAddr)
	if err != nil {
		return nil, err
	}
	st := redis.New(redis.Config{Host: host, Port: port})
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	app.Use(idempotency.New(idempotency.Config{
		KeyHeader: o.KeyHeader,
		// Event ids are not UUIDs, the middleware's default format.
		KeyHeaderValidate: func(k string) error {
			if k == "" {
				return errors.New("empty idempotency key")
			}
			return nil
		},
		Lifetime: o.Lifetime,
		Storage:  &prefixed{s: st, prefix: o.Prefix},
	}))
	client := &fasthttp.Client{MaxConnsPerHost: 4096, MaxIdleConnDuration: 30 * time.Second}
	app.All("/*", proxy.Forward(o.Upstream+"/hook", client))
	go func() { _ = app.Listener(ln) }()
	return &App{app: app, storage: st}, nil
}

// Close stops serving and closes the Redis client.
func (a *App) Close() error {
	return errors.Join(a.app.Shutdown(), a.storage.Close())
}

func splitAddr(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, err
	}
	port, err := net.LookupPort("tcp", p)
	return host, port, err
}
