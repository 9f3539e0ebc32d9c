package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/idempotency"
	"github.com/hookstamp/hookstamp/internal/testenv"
)

// Exactly-once under concurrency across every configuration combination:
// screen × ledger × inflight × record.ambiguous, with an upstream that is
// randomly fast, slow within and beyond the wait timeout, failing (503),
// timing out or cutting the connection after reading the request.

// behaviour is what the flaky upstream does with one request.
type behaviour int

const (
	bOK behaviour = iota
	bSlowWithin
	bSlowBeyond
	b503
	bTimeout
	bCut
)

func (b behaviour) final() bool     { return b == bOK || b == bSlowWithin || b == bSlowBeyond }
func (b behaviour) ambiguous() bool { return b == bTimeout || b == bCut }

// flakyUpstream answers each request as a seeded random draw says and logs,
// per key, what it did with each request in arrival order.
type flakyUpstream struct {
	*upstream
	mu     sync.Mutex
	rnd    *rand.Rand
	log    map[string][]behaviour
	bodies map[string]string // key → body of its 200 answer
}

func newFlakyUpstream(tb testing.TB, seed int64, timeout time.Duration) *flakyUpstream {
	f := &flakyUpstream{upstream: newUpstream(tb), rnd: rand.New(rand.NewSource(seed)),
		log: map[string][]behaviour{}, bodies: map[string]string{}}
	f.setReply(func(w http.ResponseWriter, r *http.Request, n int) {
		key := r.Header.Get("Idempotency-Key")
		f.mu.Lock()
		p := f.rnd.Intn(100)
		var b behaviour
		switch {
		case p < 30:
			b = bOK
		case p < 45:
			b = bSlowWithin
		case p < 60:
			b = bSlowBeyond
		case p < 75:
			b = b503
		case p < 87:
			b = bTimeout
		default:
			b = bCut
		}
		f.log[key] = append(f.log[key], b)
		idx := len(f.log[key]) - 1
		body := fmt.Sprintf(`{"key":%q,"n":%d,"b":%d}`, key, n, b)
		f.mu.Unlock()
		var delay time.Duration
		switch b {
		case bSlowWithin:
			delay = 50 * time.Millisecond
		case bSlowBeyond:
			delay = 350 * time.Millisecond
		}
		if b.final() {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
			}
			// Under load the gateway may have given up first: then this
			// was a timeout, not an answer.
			f.mu.Lock()
			if r.Context().Err() != nil {
				f.log[key][idx] = bTimeout
				f.mu.Unlock()
				return
			}
			f.bodies[key] = body
			f.mu.Unlock()
		}
		switch b {
		case b503:
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case bTimeout:
			select {
			case <-r.Context().Done():
			case <-time.After(3 * timeout):
			}
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		case bCut:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, body)
	})
	return f
}

func (f *flakyUpstream) history(key string) ([]behaviour, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]behaviour(nil), f.log[key]...), f.bodies[key]
}

func TestExactlyOnceMatrix(t *testing.T) {
	t.Parallel()
	type deployment struct {
		screen, ledger string
		gateways       int
	}
	deployments := []deployment{
		{config.ScreenMemory, config.StoreSQLite, 1},
		{config.ScreenMemory, config.StorePostgres, 1},
		{config.ScreenRedis, config.StoreSQLite, 2},
		{config.ScreenRedis, config.StorePostgres, 3},
		{config.ScreenNone, config.StoreSQLite, 2},
		{config.ScreenNone, config.StorePostgres, 3},
	}
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	for di, d := range deployments {
		for _, inflight := range []string{config.InflightWait, config.InflightReject} {
			for _, amb := range []string{config.AmbiguousRelease, config.AmbiguousHold} {
				name := fmt.Sprintf("%s+%s/%s/%s", d.screen, d.ledger, inflight, amb)
				seed := seed + int64(di*4)
				if inflight == config.InflightReject {
					seed++
				}
				if amb == config.AmbiguousHold {
					seed += 2
				}
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					matrixCase(t, d.screen, d.ledger, d.gateways, inflight, amb, seed)
				})
			}
		}
	}
}

func matrixCase(t *testing.T, screen, ledger string, n int, inflight, amb string, seed int64) {
	const timeout = time.Second
	up := newFlakyUpstream(t, seed, timeout)
	dsn, addr, prefix := matrixStores(t, screen, ledger)
	gws := make([]*Gateway, n)
	for i := range gws {
		cfg := gwConfig(t, up.URL, "unused.db", fmt.Sprintf(`    inflight: %s
    wait_timeout: 250ms
    record:
      ambiguous: %s`, inflight, amb), "")
		cfg.Routes[0].Upstream.Timeout = timeout
		cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", "matrix-token"
		cfg.Store.Driver, cfg.Store.DSN = ledger, dsn
		cfg.Screen.Driver = screen
		cfg.Screen.Lease = 5 * time.Second
		if screen == config.ScreenRedis {
			cfg.Screen.Redis.Addrs, cfg.Screen.Prefix = []string{addr}, prefix
		}
		gws[i] = startGateway(t, cfg)
	}
	const keys, copies, rounds = 4, 40, 3
	key := func(k int) string { return fmt.Sprintf("evt_m_%d", k) }
	all := make([][]reply, keys)
	for round := 0; round < rounds; round++ {
		replies := race(t, copies, func(i int) reply {
			return send(t, gws[(i+round)%n], "/hooks", fmt.Sprintf(`{"id":%q}`, key(i%keys)))
		})
		for i, r := range replies {
			all[i%keys] = append(all[i%keys], r)
		}
	}
	for k := 0; k < keys; k++ {
		key := key(k)
		hist, body := up.history(key)
		finals, ambiguous, fails := 0, 0, 0
		for i, b := range hist {
			switch {
			case b.final():
				finals++
			case b.ambiguous():
				ambiguous++
			default:
				fails++
			}
			if i > 0 && hist[i-1].final() {
				t.Errorf("%s: forwarded again (%v) after a final answer; history %v", key, b, hist)
			}
			if i > 0 && amb == config.AmbiguousHold && hist[i-1].ambiguous() {
				t.Errorf("%s: forwarded again (%v) while held; history %v", key, b, hist)
			}
		}
		outcomes := map[string]int{}
		forwardedAnswers := 0
		for _, r := range all[k] {
			o := r.outcome()
			outcomes[o]++
			bad := false
			switch o {
			case "forwarded":
				forwardedAnswers++
				bad = r.status != 200 || string(r.body) != body || r.header.Get("Idempotent-Replayed") != ""
			case "replayed":
				bad = r.status != 200 || string(r.body) != body || r.header.Get("Idempotent-Replayed") != "true" ||
					r.header.Get("Content-Type") != "application/json"
			case "released":
				forwardedAnswers++
				bad = r.status != 503 && (amb == config.AmbiguousHold || (r.status != 502 && r.status != 504))
			case "conflict":
				bad = r.status != 409 || r.header.Get("Retry-After") == ""
			case "held":
				if amb != config.AmbiguousHold {
					bad = true
				} else if r.status == 502 || r.status == 504 {
					forwardedAnswers++
				} else {
					bad = r.status != 409 || r.header.Get("Retry-After") == ""
				}
			default:
				bad = true
			}
			if bad {
				t.Errorf("%s: answer %d %q (replayed %q, retry-after %q) body %s; upstream history %v",
					key, r.status, o, r.header.Get("Idempotent-Replayed"), r.header.Get("Retry-After"), r.body, hist)
			}
		}
		if forwardedAnswers != len(hist) {
			t.Errorf("%s: upstream received %d (%v) but providers got %d answers from forwards; outcomes %v",
				key, len(hist), hist, forwardedAnswers, outcomes)
		}
		rec, err := gws[k%n].Ledger().Lookup(context.Background(), idempotency.Ref{Route: "hooks", Key: key})
		if err != nil && !errors.Is(err, idempotency.ErrNotFound) {
			t.Fatalf("ledger lookup %s: %v", key, err)
		}
		switch {
		case finals == 1:
			if rec == nil || rec.State != idempotency.StateDone || rec.Status != 200 || !bytes.Equal(rec.Body, []byte(body)) {
				t.Errorf("%s: ledger %+v, want done 200 %s", key, rec, body)
			}
		case amb == config.AmbiguousHold && ambiguous == 1:
			if rec == nil || rec.State != idempotency.StateHeld {
				t.Errorf("%s: ledger %+v, want held", key, rec)
			}
		default:
			if rec != nil && rec.State != idempotency.StatePending {
				t.Errorf("%s: ledger %+v, want no record; history %v", key, rec, hist)
			}
		}
		t.Logf("%s: upstream %v outcomes %v", key, hist, outcomes)
		if t.Failed() || rec == nil || rec.State != idempotency.StateHeld {
			continue
		}
		// Resolve the held key through one gateway's admin API while
		// copies race at every gateway: "release" lets exactly one more
		// forward through (then the usual rules), "record" replays the
		// operator's answer and never reaches the upstream again.
		action := `{"action":"release"}`
		if k%2 == 1 {
			action = `{"action":"record","status":200,"headers":{"Content-Type":"application/json"},"body":"{\"resolved\":true}"}`
		}
		req, _ := http.NewRequest(http.MethodPost, "http://"+gws[k%n].AdminAddr()+"/admin/routes/hooks/records/"+key+"/resolve", strings.NewReader(action))
		req.Header.Set("Authorization", "Bearer matrix-token")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("resolve %s: %v", key, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("resolve %s: %d", key, resp.StatusCode)
		}
		before := len(hist)
		replies := race(t, copies/2, func(i int) reply {
			return send(t, gws[i%n], "/hooks", fmt.Sprintf(`{"id":%q}`, key))
		})
		hist, body = up.history(key)
		after := hist[before:]
		if k%2 == 1 {
			if len(after) != 0 {
				t.Errorf("%s resolved with record: forwarded %v again", key, after)
			}
			for _, r := range replies {
				if r.status != 200 || r.outcome() != "replayed" || string(r.body) != `{"resolved":true}` {
					t.Errorf("%s resolved with record: answer %d %q %s", key, r.status, r.outcome(), r.body)
				}
			}
			continue
		}
		for i, b := range after {
			if i > 0 && (after[i-1].final() || after[i-1].ambiguous()) {
				t.Errorf("%s released by the operator: forwarded %v after %v", key, b, after)
			}
		}
		fw := 0
		for _, r := range replies {
			switch o := r.outcome(); {
			case o == "forwarded" || o == "released" || (o == "held" && r.status != 409):
				fw++
			case o == "replayed":
				if string(r.body) != body || r.status != 200 {
					t.Errorf("%s after release: replay %d %s, want %s", key, r.status, r.body, body)
				}
			case o == "conflict" || o == "held":
				if r.status != 409 || r.header.Get("Retry-After") == "" {
					t.Errorf("%s after release: %d %q", key, r.status, o)
				}
			default:
				t.Errorf("%s after release: %d %q %s", key, r.status, o, r.body)
			}
		}
		if fw != len(after) || len(after) == 0 {
			t.Errorf("%s released by the operator: upstream got %v, providers %d forward answers", key, after, fw)
		}
		t.Logf("%s resolved: upstream %v", key, after)
	}
}

// In wait mode with a generous wait_timeout, no repeat may end in 409
// conflict: each waits for the delivery in flight and replays its answer,
// or takes over when it was released (SPEC §4). The first forward of each
// key fails as first says; the next one answers 200.
func TestWaitersTakeOverOrReplayMatrix(t *testing.T) {
	t.Parallel()
	type deployment struct {
		screen, ledger string
		gateways       int
	}
	for _, d := range []deployment{
		{config.ScreenMemory, config.StoreSQLite, 1},
		{config.ScreenMemory, config.StorePostgres, 1},
		{config.ScreenRedis, config.StoreSQLite, 2},
		{config.ScreenRedis, config.StorePostgres, 3},
		{config.ScreenNone, config.StoreSQLite, 2},
		{config.ScreenNone, config.StorePostgres, 3},
	} {
		for _, first := range []string{"503", "cut", "timeout"} {
			for _, amb := range []string{config.AmbiguousRelease, config.AmbiguousHold} {
				if first == "503" && amb == config.AmbiguousHold {
					continue
				}
				t.Run(fmt.Sprintf("%s+%s/%s/%s", d.screen, d.ledger, first, amb), func(t *testing.T) {
					t.Parallel()
					waitersCase(t, d.screen, d.ledger, d.gateways, first, amb)
				})
			}
		}
	}
}

func waitersCase(t *testing.T, screen, ledger string, n int, first, amb string) {
	const timeout = 700 * time.Millisecond
	up := newUpstream(t)
	up.setReply(func(w http.ResponseWriter, r *http.Request, i int) {
		if i == 1 {
			switch first {
			case "503":
				time.Sleep(100 * time.Millisecond)
				w.WriteHeader(http.StatusServiceUnavailable)
			case "cut":
				time.Sleep(100 * time.Millisecond)
				if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
					conn.Close()
				}
			case "timeout":
				<-r.Context().Done()
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"n":%d}`, i)
	})
	dsn, addr, prefix := matrixStores(t, screen, ledger)
	gws := make([]*Gateway, n)
	for i := range gws {
		cfg := gwConfig(t, up.URL, "unused.db", fmt.Sprintf(`    wait_timeout: 8s
    record:
      ambiguous: %s`, amb), "")
		cfg.Routes[0].Upstream.Timeout = timeout
		cfg.Store.Driver, cfg.Store.DSN = ledger, dsn
		cfg.Screen.Driver = screen
		cfg.Screen.Lease = 5 * time.Second
		if screen == config.ScreenRedis {
			cfg.Screen.Redis.Addrs, cfg.Screen.Prefix = []string{addr}, prefix
		}
		gws[i] = startGateway(t, cfg)
	}
	const keys, copies = 3, 30
	key := func(k int) string { return fmt.Sprintf("evt_w_%d", k) }
	replies := race(t, copies, func(i int) reply {
		return send(t, gws[i%n], "/hooks", fmt.Sprintf(`{"id":%q}`, key(i%keys)))
	})
	hold := amb == config.AmbiguousHold
	for k := 0; k < keys; k++ {
		outcomes := map[string]int{}
		for i := k; i < copies; i += keys {
			r := replies[i]
			outcomes[fmt.Sprintf("%s %d", r.outcome(), r.status)]++
		}
		var want map[string]int
		per := copies / keys
		switch {
		case hold && first == "cut":
			want = map[string]int{"held 502": 1, "held 409": per - 1}
		case hold:
			want = map[string]int{"held 504": 1, "held 409": per - 1}
		default:
			st := map[string]int{"503": 503, "cut": 502, "timeout": 504}[first]
			want = map[string]int{fmt.Sprintf("released %d", st): 1, "forwarded 200": 1, "replayed 200": per - 2}
		}
		if fmt.Sprint(outcomes) != fmt.Sprint(want) {
			t.Errorf("%s: outcomes %v, want %v (upstream got %d)", key(k), outcomes, want, up.count(key(k)))
		}
	}
}

// Two gateways sharing one SQLite ledger without a screen (screen.driver
// none: the ledger is where they agree): an operator's DELETE at one of
// them forgets the key, and the next delivery — at either — is forwarded
// (SPEC §8), not replayed from the other's in-process cache.
func TestDeleteReachesEveryReplicaOnSharedSQLite(t *testing.T) {
	t.Parallel()
	up := newUpstream(t)
	path := dbPath(t)
	gws := make([]*Gateway, 2)
	for i := range gws {
		cfg := gwConfig(t, up.URL, path, "", "screen:\n  driver: none")
		cfg.Admin.Listen, cfg.Admin.Token = "127.0.0.1:0", "matrix-token"
		gws[i] = startGateway(t, cfg)
	}
	wantOutcome(t, send(t, gws[1], "/hooks", `{"id":"evt_del"}`), 200, "forwarded")
	wantOutcome(t, send(t, gws[1], "/hooks", `{"id":"evt_del"}`), 200, "replayed")
	req, _ := http.NewRequest(http.MethodDelete, "http://"+gws[0].AdminAddr()+"/admin/routes/hooks/records/evt_del", nil)
	req.Header.Set("Authorization", "Bearer matrix-token")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d", resp.StatusCode)
	}
	r := send(t, gws[1], "/hooks", `{"id":"evt_del"}`)
	if r.outcome() != "forwarded" || up.count("evt_del") != 2 {
		t.Errorf("delivery after DELETE at the other replica: %d %q, upstream got it %d times; want forwarded (2)",
			r.status, r.outcome(), up.count("evt_del"))
	}
}

// A replica whose ledger is slow spends part of its claim's lease before
// it forwards (the confirm): the forward must still end before the lease
// does, or a repeat at another replica takes the live claim over and the
// upstream gets a second copy although no gateway died (SPEC §1: a
// takeover is for a claim whose owner died). Here the lease is longer than
// upstream.timeout, as SPEC §3 asks, and the upstream answers within it.
func TestSlowConfirmDoesNotOutliveTheLease(t *testing.T) {
	t.Parallel()
	c := sharedCluster(t)
	up := newUpstream(t)
	slowReceipts(up, 900*time.Millisecond)
	proxy := testenv.StartFaultProxy(t, "127.0.0.1:5432")
	start := func(dsn string) *Gateway {
		cfg := c.replicaConfig(t, up.URL, config.ScreenUnavailableStore)
		cfg.Store.DSN = dsn
		cfg.Routes[0].Upstream.Timeout = time.Second
		cfg.Screen.Lease = 1200 * time.Millisecond
		return startGateway(t, cfg)
	}
	slow := start(strings.Replace(c.dsn, "127.0.0.1:5432", proxy.Addr, 1))
	fast := start(c.dsn)
	wantOutcome(t, send(t, slow, "/hooks", `{"id":"evt_warm"}`), 200, "forwarded") // connections, clock offset
	proxy.Slow(100 * time.Millisecond)
	first := make(chan reply, 1)
	go func() { first <- send(t, slow, "/hooks", `{"id":"evt_lease"}`) }()
	time.Sleep(1250 * time.Millisecond)
	repeat := send(t, fast, "/hooks", `{"id":"evt_lease"}`)
	r := <-first
	// Either the first was recorded and the repeat replays it, or the
	// first timed out against its lease (released: its retry is
	// forwarded); never two providers told "forwarded" with different
	// answers, one of them not the record.
	t.Logf("first %d %q, repeat %d %q, upstream got %d", r.status, r.outcome(), repeat.status, repeat.outcome(), up.count("evt_lease"))
	rec := lookup(t, fast, "hooks", "evt_lease")
	forwarded := 0
	for _, x := range []reply{r, repeat} {
		if x.outcome() == "forwarded" {
			forwarded++
			if string(x.body) != string(rec.Body) {
				t.Errorf("provider told forwarded got %s, but the ledger recorded %s", x.body, rec.Body)
			}
		}
	}
	if forwarded != 1 {
		t.Errorf("first %d %q %s, repeat %d %q %s: want exactly one forwarded (upstream got %d)",
			r.status, r.outcome(), r.body, repeat.status, repeat.outcome(), repeat.body, up.count("evt_lease"))
	}
}

// matrixStores gives a matrix case its own ledger (a SQLite file or a
// PostgreSQL schema) and, with the Redis screen, its own key prefix.
func matrixStores(t *testing.T, screen, ledger string) (dsn, addr, prefix string) {
	t.Helper()
	dsn = dbPath(t)
	if ledger == config.StorePostgres {
		dsn = testenv.Postgres(t)
	}
	if screen == config.ScreenRedis {
		addr, prefix = testenv.RedisPrefix(t)
	}
	return dsn, addr, prefix
}
