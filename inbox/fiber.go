package inbox

import (
	"bytes"
	"net/http"
	"strings"

	"github.com/gofiber/fiber/v2"
)

// Fiber is Middleware for a Fiber handler: next runs at most once per key,
// inside the transaction that records it (Tx(c.UserContext()) gives it),
// and every repeat gets the recorded answer. next's answer is read from
// c.Response() once it returns; an error returned by next rolls back, like
// a non-final status, and is passed on to Fiber's error handler.
func (in *Inbox) Fiber(next fiber.Handler) fiber.Handler {
	return func(c *fiber.Ctx) error {
		key := strings.Clone(c.Get(in.o.Header)) // fasthttp reuses the request's buffers
		if p := in.keyProblem(key); p != "" {
			return c.Status(http.StatusBadRequest).SendString(p)
		}
		ctx := c.UserContext()
		cl, replay, leave, err := in.begin(ctx, key)
		if leave != nil {
			defer leave()
		}
		switch {
		case err != nil:
			in.o.Logger.Error("inbox: could not claim the key", "key", key, "err", err)
			return c.Status(http.StatusServiceUnavailable).SendString("inbox unavailable")
		case replay != nil:
			return replay.send(c)
		}
		var handlerErr error
		c.SetUserContext(in.withTx(ctx, key, cl.tx))
		defer c.SetUserContext(ctx)
		replay, ok := in.run(ctx, cl, func() int {
			if handlerErr = next(c); handlerErr != nil {
				return http.StatusInternalServerError // not final: rolled back
			}
			return c.Response().StatusCode()
		}, func() (string, []byte) {
			h := http.Header{}
			for _, name := range in.o.Headers {
				for _, v := range c.Response().Header.PeekAll(name) {
					h.Add(name, string(v))
				}
			}
			return in.encodeHeader(h), bytes.Clone(c.Response().Body())
		})
		switch {
		case handlerErr != nil:
			return handlerErr
		case !ok:
			c.Response().Reset()
			return c.Status(http.StatusServiceUnavailable).SendString("inbox could not record the answer")
		case replay != nil:
			c.Response().Reset()
			return replay.send(c)
		}
		return nil
	}
}

func (a *answer) send(c *fiber.Ctx) error {
	for name, vs := range a.header {
		c.Response().Header.Del(name)
		for _, v := range vs {
			c.Response().Header.Add(name, v)
		}
	}
	return c.Status(a.status).Send(a.body)
}
