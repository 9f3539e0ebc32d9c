package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Upstream actions, as recorded in the upstream log.
const (
	ActApply   = "apply"   // effect applied, answered 200
	ActDecline = "decline" // business refusal recorded, answered 402 (final, no booking)
	ActFail    = "fail"    // answered 5xx, nothing applied
	ActHang    = "hang"    // never answered, nothing applied
	ActReset   = "reset"   // connection dropped after reading, nothing applied
	// ActLost: effect applied, then the answer was never sent (the
	// connection dropped when the gateway gave up): the ambiguous result
	// record.ambiguous is about.
	ActLost = "lost"
)

// UpRecord is one request the upstream received, as its log keeps it.
type UpRecord struct {
	Seq     int64     `json:"seq"`
	Time    time.Time `json:"t"`
	Gateway string    `json:"gw"` // the gateway incarnation that forwarded it ("g2.3")
	Route   string    `json:"route"`
	Key     string    `json:"key"` // the Idempotency-Key header
	Body    []byte    `json:"body"`
	Action  string    `json:"action"`
	// Applied: the upstream acted on the delivery (a booking or a recorded
	// refusal) before answering; the answer may still have been lost.
	Applied     bool   `json:"applied"`
	Status      int    `json:"status,omitempty"`
	ContentType string `json:"content_type,omitempty"`
	Response    []byte `json:"response,omitempty"`
	// AnswerAt is when the answer was due to go out (sooner if the gateway
	// gave up); zero when none was to be sent. For whoever reads the log
	// of a failed run: set beside Time, it shows a slow application.
	AnswerAt time.Time `json:"answer_at,omitzero"`
}

// UpstreamMode is how the upstream behaves; the fault schedule changes it.
type UpstreamMode struct {
	// Slow delays every applied answer by a random duration in
	// [SlowMin, SlowMax] (kept under the gateways' upstream timeout, so an
	// applied answer is never lost to a timeout).
	SlowMin, SlowMax time.Duration
	// FailRatio of requests are answered 500/503 without being applied.
	FailRatio float64
	// Hang: no request is answered (nor applied) until the gateway gives up.
	Hang bool
	// Reset: every connection is dropped after the request was read.
	Reset bool
	// LoseAnswers: every request is applied, then left unanswered until
	// the gateway gives up (its connection is then dropped).
	LoseAnswers bool
}

func (m UpstreamMode) String() string {
	switch {
	case m.Hang:
		return "hang"
	case m.Reset:
		return "reset"
	case m.LoseAnswers:
		return "losing answers"
	case m.FailRatio > 0:
		return fmt.Sprintf("failing %.0f%%", m.FailRatio*100)
	case m.SlowMax > 0:
		return fmt.Sprintf("slow %v-%v", m.SlowMin, m.SlowMax)
	}
	return "normal"
}

// baseLatency bounds how long the upstream takes on an ordinary delivery.
const baseLatency = 50 * time.Millisecond

// Upstream is the application behind the gateways: an in-process HTTP
// server that applies deliveries and appends every request it receives to
// a log, fsynced before the answer is written, so that the log is the
// ground truth of what reached the upstream even if the answer is lost.
//
// Gateways forward to /g/{incarnation}/{route}: the path tells which
// gateway process forwarded each request.
type Upstream struct {
	ln   net.Listener
	srv  *http.Server
	log  *durableLog
	seq  atomic.Int64
	hold time.Duration // how long a held request waits for its gateway to die

	mu       sync.Mutex
	mode     UpstreamMode
	holdFrom map[string]bool      // gateway incarnations whose requests are held
	holding  map[string]int       // requests currently held, per incarnation
	heldOn   map[string]int       // requests currently held, per route
	applied  map[string]*UpRecord // the first applied request of each route and key
	wake     chan struct{}        // closed when the mode changes (hung requests re-check)
	effects  *Effects             // nil: effects are the log's alone; else applied through an inbox
}

// StartUpstream listens on a free loopback port and logs to path.
func StartUpstream(path string) (*Upstream, error) {
	lg, err := openDurableLog(path)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		lg.close()
		return nil, fmt.Errorf("upstream: listen: %w", err)
	}
	u := &Upstream{ln: ln, log: lg, hold: 800 * time.Millisecond,
		holdFrom: map[string]bool{}, holding: map[string]int{}, heldOn: map[string]int{},
		applied: map[string]*UpRecord{}, wake: make(chan struct{})}
	u.srv = &http.Server{Handler: u, ReadHeaderTimeout: 5 * time.Second, ErrorLog: discardLogger()}
	go func() { _ = u.srv.Serve(ln) }()
	return u, nil
}

// URL is the upstream's base URL.
func (u *Upstream) URL() string { return "http://" + u.ln.Addr().String() }

// SetMode changes how the upstream answers from now on.
func (u *Upstream) SetMode(m UpstreamMode) {
	u.mu.Lock()
	u.mode = m
	close(u.wake)
	u.wake = make(chan struct{})
	u.mu.Unlock()
}

// HoldFrom makes the upstream apply every request from gateway incarnation
// gw and then hold its answer (up to 800ms, under the gateway's timeout):
// a kill during the hold is a crash after the upstream acted and before
// the gateway could record the answer.
func (u *Upstream) HoldFrom(gw string, on bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if on {
		u.holdFrom[gw] = true
	} else {
		delete(u.holdFrom, gw)
	}
}

// ApplyThrough makes the upstream apply every effect through e's inbox, in
// e's database: a second copy of an applied event is absorbed there.
func (u *Upstream) ApplyThrough(e *Effects) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.effects = e
}

// Holding is the number of requests from gw held right now.
func (u *Upstream) Holding(gw string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.holding[gw]
}

// HoldingOn is the number of requests on route held right now.
func (u *Upstream) HoldingOn(route string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.heldOn[route]
}

// Close stops the server (cutting requests still held) and closes the log.
func (u *Upstream) Close() error {
	err := u.srv.Close()
	if lerr := u.log.close(); err == nil {
		err = lerr
	}
	return err
}

// ServeHTTP applies, refuses or drops one delivery as the mode says, and
// logs it durably before answering.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec, ok := u.receive(w, r)
	if !ok {
		return
	}
	u.mu.Lock()
	mode, held, wake, effects := u.mode, u.holdFrom[rec.Gateway], u.wake, u.effects
	if held {
		u.holding[rec.Gateway]++
		u.heldOn[rec.Route]++
	}
	u.mu.Unlock()
	if held {
		defer func() {
			u.mu.Lock()
			u.holding[rec.Gateway]--
			u.heldOn[rec.Route]--
			u.mu.Unlock()
		}()
	}

	if u.refuse(w, r, rec, mode, held, wake) {
		return
	}
	applyDelivery(r, rec, effects)
	if rec.Action == ActFail {
		u.logAndWrite(w, rec)
		return
	}
	lose := !held && mode.LoseAnswers
	if lose && rec.Applied {
		rec.Action = ActLost
	}
	delay := u.answerDelay(mode, held)
	if !lose {
		rec.AnswerAt = time.Now().Add(delay)
	}
	if err := u.log.append(rec); err != nil {
		panic(http.ErrAbortHandler) // not logged: not applied
	}
	u.noteFirstApplied(rec)
	if lose {
		hang(r, wake)
	}
	writeAfter(w, r, rec, delay)
}

// receive reads a delivery into a new record; false when r is not one, or
// when nothing was received.
func (u *Upstream) receive(w http.ResponseWriter, r *http.Request) (*UpRecord, bool) {
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 4)
	if len(parts) < 3 || parts[0] != "g" {
		http.NotFound(w, r)
		return nil, false
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, false // the gateway went away while sending: nothing was received
	}
	gw := parts[1]
	if user, _, ok := r.BasicAuth(); ok && user != "" {
		gw = user // the forwarding gateway (configYAML)
	}
	return &UpRecord{Seq: u.seq.Add(1), Time: time.Now(), Gateway: gw, Route: parts[2],
		Key: r.Header.Get("Idempotency-Key"), Body: body}, true
}

// refuse hangs, resets or fails the delivery without applying it when the
// mode says so, and reports whether it answered.
func (u *Upstream) refuse(w http.ResponseWriter, r *http.Request, rec *UpRecord, mode UpstreamMode, held bool, wake <-chan struct{}) bool {
	switch {
	case held:
		// Apply first, then hold the answer: the gateway is about to die.
	case mode.Hang:
		rec.Action = ActHang
		if u.log.append(rec) != nil {
			panic(http.ErrAbortHandler)
		}
		hang(r, wake)
	case mode.Reset:
		rec.Action = ActReset
		_ = u.log.append(rec)
		panic(http.ErrAbortHandler)
	case mode.FailRatio > 0 && rand.Float64() < mode.FailRatio:
		rec.Action, rec.Status = ActFail, http.StatusServiceUnavailable
		if rand.IntN(2) == 0 {
			rec.Status = http.StatusInternalServerError
		}
		rec.ContentType = "application/json"
		rec.Response = fmt.Appendf(nil, `{"error":"upstream failing","delivery":%d}`, rec.Seq)
		u.logAndWrite(w, rec)
		return true
	}
	return false
}

// applyDelivery books the delivery, or records its refusal when the event
// asks to be declined; through the inbox when effects is set.
func applyDelivery(r *http.Request, rec *UpRecord, effects *Effects) {
	rec.Applied, rec.Status, rec.Action, rec.ContentType = true, http.StatusOK, ActApply, "application/json"
	if bytes.Contains(rec.Body, []byte(`"chaos_effect":"decline"`)) {
		rec.Status, rec.Action = http.StatusPaymentRequired, ActDecline
		rec.Response = fmt.Appendf(nil, `{"declined":%s,"delivery":%d,"gw":%q}`, strconv.Quote(rec.Key), rec.Seq, rec.Gateway)
	} else {
		rec.Response = fmt.Appendf(nil, `{"booked":%s,"delivery":%d,"gw":%q}`, strconv.Quote(rec.Key), rec.Seq, rec.Gateway)
	}
	if effects != nil {
		effects.apply(r, rec)
	}
}

// logAndWrite answers with rec once it is logged; unlogged, it drops the
// connection.
func (u *Upstream) logAndWrite(w http.ResponseWriter, rec *UpRecord) {
	rec.AnswerAt = time.Now()
	if u.log.append(rec) != nil {
		panic(http.ErrAbortHandler)
	}
	write(w, rec)
}

// noteFirstApplied keeps rec for FirstApplied if it is the first applied
// request of its route and key.
func (u *Upstream) noteFirstApplied(rec *UpRecord) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.applied[refKey(rec.Route, rec.Key)]; !ok && rec.Applied {
		u.applied[refKey(rec.Route, rec.Key)] = rec
	}
}

// answerDelay is how long an applied delivery waits for its answer.
func (u *Upstream) answerDelay(mode UpstreamMode, held bool) time.Duration {
	switch {
	case held:
		return u.hold
	case mode.SlowMax > 0:
		return mode.SlowMin + rand.N(mode.SlowMax-mode.SlowMin+1)
	default:
		// A real application takes a while: the longer a forward is in
		// flight, the more a race between replicas can show.
		return baseLatency/10 + rand.N(baseLatency)
	}
}

// writeAfter answers with rec after delay, or as soon as the gateway gives
// up.
func writeAfter(w http.ResponseWriter, r *http.Request, rec *UpRecord, delay time.Duration) {
	t := time.NewTimer(delay)
	select {
	case <-t.C:
	case <-r.Context().Done():
		t.Stop()
	}
	write(w, rec)
}

// hang leaves r unanswered until its gateway gives up or the mode
// changes, then drops the connection.
func hang(r *http.Request, wake <-chan struct{}) {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-r.Context().Done():
	case <-t.C:
	case <-wake:
	}
	panic(http.ErrAbortHandler)
}

// FirstApplied is the first request of key on route that the upstream
// applied, if any: what an operator checks before resolving a held key.
func (u *Upstream) FirstApplied(route, key string) (*UpRecord, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	rec, ok := u.applied[refKey(route, key)]
	return rec, ok
}

func write(w http.ResponseWriter, rec *UpRecord) {
	w.Header().Set("Content-Type", rec.ContentType)
	w.Header().Set("X-Upstream-Delivery", strconv.FormatInt(rec.Seq, 10))
	w.WriteHeader(rec.Status)
	_, _ = w.Write(rec.Response)
}

// durableLog appends JSON lines and fsyncs them before append returns,
// batching the lines of concurrent requests into one fsync.
type durableLog struct {
	f    *os.File
	reqs chan logReq
	done chan struct{}

	mu     sync.RWMutex // append holds it shared, close exclusively
	closed bool
}

type logReq struct {
	line []byte
	done chan error
}

func openDurableLog(path string) (*durableLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("upstream log: %w", err)
	}
	l := &durableLog{f: f, reqs: make(chan logReq, 1024), done: make(chan struct{})}
	go l.loop()
	return l, nil
}

var errLogClosed = errors.New("upstream log closed")

func (l *durableLog) append(rec *UpRecord) error {
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	req := logReq{line: append(line, '\n'), done: make(chan error, 1)}
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.closed {
		return errLogClosed
	}
	l.reqs <- req
	return <-req.done
}

func (l *durableLog) loop() {
	defer close(l.done)
	var batch []logReq
	for first := range l.reqs {
		batch = append(batch[:0], first)
	more:
		for len(batch) < 512 {
			select {
			case r, ok := <-l.reqs:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		var buf bytes.Buffer
		for _, r := range batch {
			buf.Write(r.line)
		}
		_, err := l.f.Write(buf.Bytes())
		if err == nil {
			err = l.f.Sync()
		}
		for _, r := range batch {
			r.done <- err
		}
	}
}

func (l *durableLog) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	close(l.reqs)
	l.mu.Unlock()
	<-l.done
	return l.f.Close()
}

// ReadUpstreamLog reads the records an Upstream logged at path.
func ReadUpstreamLog(path string) ([]*UpRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read upstream log: %w", err)
	}
	defer f.Close()
	var out []*UpRecord
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var r UpRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("read upstream log: line %d: %w", len(out)+1, err)
		}
		out = append(out, &r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read upstream log: %w", err)
	}
	return out, nil
}
