package ingress

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"

	"github.com/hookstamp/hookstamp/internal/idempotency"
)

// Response headers hookstamp sets itself.
const (
	HeaderOutcome     = "Hookstamp-Outcome"
	HeaderReplayed    = "Idempotent-Replayed"
	HeaderBodyOmitted = "Hookstamp-Body-Omitted"
)

// answer is the one place where a Result becomes an HTTP answer: the
// upstream's own answer, a byte-exact replay, or a problem document.
func answer(c *fiber.Ctx, res *idempotency.Result) error {
	c.Set(HeaderOutcome, string(res.Outcome))
	switch {
	case res.Replay != nil:
		return writeReplay(c, res.Replay, true)
	case res.Ack != nil:
		return writeReplay(c, res.Ack, false)
	case res.Upstream != nil:
		return writeUpstream(c, res.Upstream)
	case res.Answer != nil:
		c.Status(res.Answer.Status)
		c.Set(fiber.HeaderContentType, res.Answer.Headers[fiber.HeaderContentType])
		return c.Send(res.Answer.Body)
	}
	status := res.Status
	if status == 0 {
		status = http.StatusBadGateway
	}
	return writeProblem(c, status, res.Outcome, res.Detail, res.RetryAfter)
}

// refuse is an answer the ingress makes itself, before or without the
// state machine. A 503 of its own has Retry-After 1 s: nothing was
// forwarded, the provider may retry at once elsewhere.
func refuse(o idempotency.Outcome, detail string, err error) idempotency.Result {
	return idempotency.Refusal(o, detail, err, time.Second)
}

// writeReplay sends exactly the recorded status, kept headers and body;
// an async route's acknowledgement is sent so too, marked replayed on
// repeats only. A response without a valid status (a record that holds
// no answer, status 0) is refused with 503: fasthttp would send it as a
// 200, telling the provider an event was taken that may never have been.
func writeReplay(c *fiber.Ctx, r *idempotency.Response, replayed bool) error {
	if r.Status < 100 || r.Status > 999 {
		return writeProblem(c, http.StatusServiceUnavailable, idempotency.Unavailable,
			"hookstamp holds no answer to replay for this delivery; nothing was forwarded, retry later", time.Second)
	}
	h := &c.Response().Header
	h.SetNoDefaultContentType(true)
	for name, v := range r.Headers {
		if idempotency.SetByReplay(name) {
			// The replay's own, even from a record older than the rule.
			continue
		}
		h.Set(name, v)
	}
	if replayed {
		h.Set(HeaderReplayed, "true")
	}
	if r.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	headLength(c, r.Headers["Content-Length"])
	c.Status(r.Status)
	return c.Send(r.Body)
}

// writeUpstream passes the upstream's answer on. Hop-by-hop headers were
// removed by the forwarder; framing headers are fasthttp's to set.
func writeUpstream(c *fiber.Ctx, up *idempotency.Upstream) error {
	h := &c.Response().Header
	h.SetNoDefaultContentType(true)
	for name, vals := range up.Header {
		switch name {
		case "Content-Length", "Transfer-Encoding", "Connection", HeaderOutcome, HeaderReplayed, HeaderBodyOmitted:
			continue
		case "Content-Encoding":
			if up.BodyOmitted {
				continue // an empty body marked gzip is not gzip, nor is its replay
			}
		}
		if len(vals) > 1 && keptOnce(name) {
			// fasthttp's Add replaces the line before: one joined line
			// (RFC 9110 §5.3), as a replay carries it.
			h.Set(name, strings.Join(vals, ", "))
			continue
		}
		for i, v := range vals {
			if i == 0 {
				h.Set(name, v)
			} else {
				h.Add(name, v)
			}
		}
	}
	if up.BodyOmitted {
		h.Set(HeaderBodyOmitted, "true")
	}
	headLength(c, up.Header.Get("Content-Length"))
	c.Status(up.Status)
	return c.Send(up.Body)
}

// headLength gives an answer to HEAD the Content-Length the upstream
// declared (RFC 9110 §8.6), which fasthttp would set to the empty body's.
func headLength(c *fiber.Ctx, declared string) {
	if c.Method() != fiber.MethodHead {
		return
	}
	if n, err := strconv.Atoi(declared); err == nil && n >= 0 {
		c.Response().Header.SetContentLength(n)
	}
}

// keptOnce reports whether fasthttp keeps one value of response header
// name, its Add replacing the last.
func keptOnce(name string) bool {
	switch name {
	case "Content-Type", "Content-Encoding", "Server":
		return true
	}
	return false
}

// Problem is an RFC 9457 problem document with hookstamp's outcome member.
type Problem struct {
	Type    string `json:"type"`
	Title   string `json:"title"`
	Status  int    `json:"status"`
	Detail  string `json:"detail"`
	Outcome string `json:"outcome,omitempty"`
}

// writeProblem answers with a problem document. Detail is hookstamp's own
// text, never request bytes.
func writeProblem(c *fiber.Ctx, status int, outcome idempotency.Outcome, detail string, retryAfter time.Duration) error {
	if retryAfter > 0 {
		secs := int((retryAfter + time.Second - 1) / time.Second)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
	}
	if outcome != "" {
		c.Set(HeaderOutcome, string(outcome))
	}
	if detail == "" {
		detail = http.StatusText(status)
	}
	b, _ := json.Marshal(Problem{Type: "about:blank", Title: http.StatusText(status), Status: status,
		Detail: detail, Outcome: string(outcome)})
	c.Set(fiber.HeaderContentType, "application/problem+json")
	c.Status(status)
	return c.Send(b)
}

// safeDetail makes an error message fit for a problem detail: printable
// ASCII only, bounded, so that no request byte is echoed raw.
func safeDetail(s string) string {
	const max = 200
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= max {
			break
		}
		if r >= 0x20 && r < 0x7f {
			b.WriteRune(r)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
