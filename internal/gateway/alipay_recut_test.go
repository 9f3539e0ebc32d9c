package gateway

import (
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"
)

// repartition returns body with parameter into swallowing parameter absorb
// ("into=v1%26absorb%3Dv2"): Alipay's signed string, the decoded pairs
// sorted and joined with "&", is the same, so the genuine sign still fits.
func repartition(tb testing.TB, body []byte, into, absorb string) []byte {
	tb.Helper()
	q, err := url.ParseQuery(string(body))
	if err != nil {
		tb.Fatal(err)
	}
	q.Set(into, q.Get(into)+"&"+absorb+"="+q.Get(absorb))
	q.Del(absorb)
	return []byte(q.Encode())
}

// SPEC §1: "a forged request must never be able to occupy a key and swallow
// the genuine delivery that follows it." An Alipay notification whose
// parameters were re-cut from a genuine one (total_amount swallowing
// trade_no) is not what Alipay sent; if it verifies, it occupies the
// notify_id with another fingerprint and every genuine resend is refused
// (422) for the whole retry window. And one re-cut so that notify_id itself
// changes reaches the upstream a second time under a new key.
func TestAlipayRepartitionedNotificationCannotPoisonTheKey(t *testing.T) {
	p := newProviders(t)
	var calls atomic.Int64
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first attempt is released
			return
		}
		_, _ = w.Write([]byte("success"))
	})
	var routes []presetCase
	for _, c := range presetCases(p) {
		if c.preset == "alipay" {
			routes = append(routes, c)
		}
	}
	g := startGateway(t, routesConfig(t, dbPath(t), "", "", presetRoutes(up.URL, routes), p.environ))
	form := headers("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	now := time.Now()

	first := alipayNotify(t, p.alipayKey, now, "20.00")
	wantOutcome(t, post(t, g, "/webhooks/alipay", first, form), http.StatusServiceUnavailable, "released")

	// Someone who saw the first attempt re-cuts it before Alipay resends.
	recut := repartition(t, first, "total_amount", "trade_no")
	r := post(t, g, "/webhooks/alipay", recut, form)
	if r.status != http.StatusUnauthorized {
		t.Errorf("re-cut notification: %d %s (%s), want 401 unverified", r.status, r.outcome(), r.body)
	}

	resend := alipayNotify(t, p.alipayKey, now.Add(4*time.Minute), "20.00")
	if r := post(t, g, "/webhooks/alipay", resend, form); r.status != http.StatusOK {
		t.Errorf("Alipay's genuine resend: %d %s (%s), want 200: the key was poisoned", r.status, r.outcome(), r.body)
	}

	before := up.total.Load()
	newKey := repartition(t, resend, "notify_id", "notify_time")
	r = post(t, g, "/webhooks/alipay", newKey, form)
	if got := up.total.Load() - before; got != 0 || r.status != http.StatusUnauthorized {
		t.Errorf("notification re-cut to a new notify_id: %d %s, upstream got it %d more time(s); want 401 and none",
			r.status, r.outcome(), got)
	}
}
