package gateway

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/verify/verifytest"
)

// Secrets of the signature tests' stripe route: the current one and the
// one being rotated out; both must verify.
const (
	sigCurrent = "whsec_current_2b7e151628aed2a6abf71588"
	sigOld     = "whsec_previous_3c4fcf098815f7aba6d2ae28"
	sigWrong   = "whsec_not_configured_anywhere_0000"
)

// stripeV1 is a Stripe v1 signature: hex HMAC-SHA256 of "{t}.{body}",
// written here so that headers the stripe-go signer would never produce
// (several v1, odd layouts) can be built.
func stripeV1(secret string, t int64, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "%d.", t)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Signature edge cases through the whole gateway: every rejection is a 401
// problem that forwards and records nothing; rotation and tolerance work;
// an oversized signature header gets a clean 4xx before any parsing.
func TestSignatureEdgeCases(t *testing.T) {
	up := newUpstream(t)
	db := dbPath(t)
	routes := fmt.Sprintf(`  - name: stripe
    path: /webhooks/stripe
    preset: stripe
    upstream:
      url: %[1]s/stripe
    verify:
      secrets: ["${STRIPE_SECRET}", "${STRIPE_SECRET_OLD}"]
      tolerance: 5m
  - name: github
    path: /webhooks/github
    preset: github
    upstream:
      url: %[1]s/github
    verify:
      secrets: ["${GITHUB_SECRET}"]
`, up.URL)
	g := startGateway(t, routesConfig(t, db, "", "", routes, []string{
		"STRIPE_SECRET=" + sigCurrent, "STRIPE_SECRET_OLD=" + sigOld, "GITHUB_SECRET=" + githubSecret,
	}))

	event := func(id string) []byte {
		return []byte(`{"id":"` + id + `","object":"event","type":"invoice.paid","data":{"object":{"id":"in_1","amount_paid":4200}}}`)
	}
	now := time.Now()
	ts := now.Unix()
	stripeHdr := func(v string) http.Header { return headers("Stripe-Signature", v) }
	signed := func(secret string, at time.Time, body []byte) http.Header {
		return verifytest.Stripe(secret, body, at)
	}

	accepted := []struct {
		name string
		hdr  func(body []byte) http.Header
	}{
		{"current secret", func(b []byte) http.Header { return signed(sigCurrent, now, b) }},
		{"secret being rotated out", func(b []byte) http.Header { return signed(sigOld, now, b) }},
		{"several v1, one of them right", func(b []byte) http.Header {
			return stripeHdr(fmt.Sprintf("t=%d,v1=%s,v1=%s", ts, stripeV1(sigWrong, ts, b), stripeV1(sigOld, ts, b)))
		}},
		{"a v0 and an unknown scheme beside v1", func(b []byte) http.Header {
			return stripeHdr(fmt.Sprintf("t=%d,v0=%s,v1=%s,v9=zz", ts, stripeV1(sigCurrent, ts, b), stripeV1(sigCurrent, ts, b)))
		}},
		{"timestamp 4 minutes old", func(b []byte) http.Header { return signed(sigCurrent, now.Add(-4*time.Minute), b) }},
		{"timestamp 4 minutes ahead", func(b []byte) http.Header { return signed(sigCurrent, now.Add(4*time.Minute), b) }},
		{"a rotation header of ten signatures (~700 bytes)", func(b []byte) http.Header {
			v := "t=" + strconv.FormatInt(ts, 10)
			for i := 0; i < 9; i++ {
				v += ",v1=" + stripeV1(fmt.Sprintf("whsec_other_%d", i), ts, b)
			}
			return stripeHdr(v + ",v1=" + stripeV1(sigCurrent, ts, b))
		}},
	}
	for i, c := range accepted {
		t.Run("accepted/"+c.name, func(t *testing.T) {
			id := fmt.Sprintf("evt_sig_ok_%d", i)
			b := event(id)
			wantOutcome(t, post(t, g, "/webhooks/stripe", b, c.hdr(b)), 200, "forwarded")
			if n := up.count(id); n != 1 {
				t.Fatalf("upstream received %d, want 1", n)
			}
		})
	}

	rows := ledgerRows(t, db)
	before := up.total.Load()
	rejected := []struct {
		name string
		// body and hdr of the delivery; leak lists what must not be echoed.
		req func(id string) (body []byte, hdr http.Header, leak []string)
	}{
		{"wrong secret", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			h := signed(sigWrong, now, b)
			return b, h, []string{sigWrong, stripeV1(sigWrong, ts, b)}
		}},
		{"tampered body", func(id string) ([]byte, http.Header, []string) {
			h := signed(sigCurrent, now, event(id))
			return []byte(strings.Replace(string(event(id)), "4200", "9999", 1)), h, []string{sigCurrent}
		}},
		{"tampered timestamp", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			return b, stripeHdr(fmt.Sprintf("t=%d,v1=%s", ts+1, stripeV1(sigCurrent, ts, b))), nil
		}},
		{"stale timestamp (6 minutes)", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			return b, signed(sigCurrent, now.Add(-6*time.Minute), b), nil
		}},
		{"future timestamp (6 minutes)", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			return b, signed(sigCurrent, now.Add(6*time.Minute), b), nil
		}},
		{"ancient timestamp", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			return b, stripeHdr(fmt.Sprintf("t=1,v1=%s", stripeV1(sigCurrent, 1, b))), nil
		}},
		{"no signature header", func(id string) ([]byte, http.Header, []string) {
			return event(id), nil, nil
		}},
		{"empty signature header", func(id string) ([]byte, http.Header, []string) {
			return event(id), stripeHdr(""), nil
		}},
		{"truncated signature", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			v := signed(sigCurrent, now, b).Get("Stripe-Signature")
			return b, stripeHdr(v[:len(v)-20]), nil
		}},
		{"timestamp only", func(id string) ([]byte, http.Header, []string) {
			return event(id), stripeHdr(fmt.Sprintf("t=%d", ts)), nil
		}},
		{"duplicated header: a forged line before the genuine one", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			h := stripeHdr(fmt.Sprintf("t=%d,v1=%s", ts, stripeV1(sigWrong, ts, b)))
			h.Add("Stripe-Signature", signed(sigCurrent, now, b).Get("Stripe-Signature"))
			return b, h, nil
		}},
		{"duplicated header: the genuine line twice", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			v := signed(sigCurrent, now, b).Get("Stripe-Signature")
			return b, headers("Stripe-Signature", v, "Stripe-Signature", v), nil
		}},
		{"signature header over the verifier's cap (5 KiB)", func(id string) ([]byte, http.Header, []string) {
			b := event(id)
			v := signed(sigCurrent, now, b).Get("Stripe-Signature")
			return b, stripeHdr(v + strings.Repeat(",v1="+strings.Repeat("0", 64), 75)), nil
		}},
		{"non-hex signature", func(id string) ([]byte, http.Header, []string) {
			return event(id), stripeHdr(fmt.Sprintf("t=%d,v1=%s", ts, strings.Repeat("zz", 32))), nil
		}},
	}
	for i, c := range rejected {
		t.Run("rejected/"+c.name, func(t *testing.T) {
			id := fmt.Sprintf("evt_sig_bad_%d", i)
			body, hdr, leak := c.req(id)
			r := post(t, g, "/webhooks/stripe", body, hdr)
			wantProblem(t, r, 401, "unverified", append(leak, sigCurrent, sigOld)...)
			if r.header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("a rejection was marked as a replay")
			}
		})
	}
	t.Run("rejected/github duplicated X-Hub-Signature-256", func(t *testing.T) {
		b := []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`)
		good := verifytest.GitHub(githubSecret, b).Get("X-Hub-Signature-256")
		h := headers("X-GitHub-Delivery", "gh-dup-1", "X-Hub-Signature-256", good, "X-Hub-Signature-256", "sha256="+strings.Repeat("0", 64))
		wantProblem(t, post(t, g, "/webhooks/github", b, h), 401, "unverified", githubSecret)
	})
	t.Run("rejected/github signature with the wrong prefix", func(t *testing.T) {
		b := []byte(`{"zen":"Design for failure.","hook_id":2}`)
		good := verifytest.GitHub(githubSecret, b).Get("X-Hub-Signature-256")
		h := headers("X-GitHub-Delivery", "gh-prefix-1", "X-Hub-Signature-256", "sha1="+strings.TrimPrefix(good, "sha256="))
		wantProblem(t, post(t, g, "/webhooks/github", b, h), 401, "unverified", githubSecret)
	})
	if got := up.total.Load() - before; got != 0 {
		t.Fatalf("%d rejected deliveries were forwarded", got)
	}
	if got := ledgerRows(t, db); got != rows {
		t.Fatalf("rejected deliveries changed the ledger: %d rows, want %d", got, rows)
	}

	t.Run("1 MiB signature header", func(t *testing.T) {
		// Far over the header limit: the HTTP layer answers before any
		// route sees it (431, no outcome), or the verifier does (401).
		// Either way: a clean problem answer, nothing forwarded.
		b := event("evt_sig_huge")
		req := fmt.Sprintf("POST /webhooks/stripe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"+
			"Stripe-Signature: t=%d,v1=%s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
			ts, strings.Repeat("a", 1<<20), len(b), b)
		replies := rawExchange(t, g, req, 10*time.Second)
		if len(replies) != 1 {
			t.Fatalf("got %d answers, want 1", len(replies))
		}
		wantProblem(t, replies[0].reply(), http.StatusRequestHeaderFieldsTooLarge, "")
		if up.total.Load() != before {
			t.Fatalf("forwarded a delivery with a 1 MiB signature header")
		}
	})
	t.Run("a provider's full header set behind two proxies fits", func(t *testing.T) {
		// ~6 KiB of headers: what a Shopify delivery looks like after a CDN
		// and a service mesh added theirs (the mesh's client certificate
		// header alone can be 2 KiB).
		b := event("evt_sig_big_headers")
		h := signed(sigCurrent, now, b)
		h.Set("X-Forwarded-Client-Cert", "By=spiffe://cluster.local/ns/hooks/sa/gateway;Hash="+strings.Repeat("9f", 32)+
			";Cert=\""+strings.Repeat("MIIB", 500)+"\"")
		for i := 0; i < 20; i++ {
			h.Set(fmt.Sprintf("X-Edge-Hop-%d", i), strings.Repeat("e", 100))
		}
		wantOutcome(t, post(t, g, "/webhooks/stripe", b, h), 200, "forwarded")
	})
}
