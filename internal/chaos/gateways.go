package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/template"
	"time"
)

// Life is one incarnation of a gateway process: from its start to its
// death. Incarnations are named "g2.3" (gateway 2, third start); the
// upstream sees the name in the forwarded path.
type Life struct {
	Name    string
	Gateway int
	PID     int
	LogPath string
	Start   time.Time
	// Ready is when it first answered on its listener.
	Ready time.Time
	// Stopping is when SIGTERM or SIGKILL was sent (zero: never).
	Stopping time.Time
	// End is when the process was seen to exit (zero while running).
	End time.Time
	// How it ended: "killed" (SIGKILL), "terminated" (SIGTERM), "exited"
	// (on its own), or "" while running.
	How      string
	ExitCode int
	// Frozen are the spans it spent stopped by SIGSTOP (gateway_frozen).
	Frozen []Stall
	// Metrics is its last scrape of /metrics (nil: never scraped).
	Metrics *Scrape
}

// Crashed reports whether the incarnation died by SIGKILL.
func (l *Life) Crashed() bool { return l.How == "killed" }

// GatewaySettings are the configuration values the harness chooses for
// every gateway process.
type GatewaySettings struct {
	PostgresDSN   string // through the PostgreSQL proxy
	RedisAddr     string // through the Redis proxy
	UpstreamURL   string // base URL; "/g/{incarnation}/{route}" is appended
	StripeSecret  string
	Lease         time.Duration
	Timeout       time.Duration // upstream.timeout of every route
	WaitTimeout   time.Duration
	Shutdown      time.Duration
	StoreFailMode string // store.on_unavailable: reject | pass
	LocalCache    string // screen.local_cache
	LogLevel      string
	Async         bool // add the store-and-forward route asyncRoute
}

// configYAML renders the configuration of one incarnation. Every route
// claims in Redis, confirms in PostgreSQL, and claims in PostgreSQL when
// Redis cannot be reached (screen.on_unavailable: store); holdRoute holds
// ambiguous results (record.ambiguous: hold), the others release them.
func configYAML(s GatewaySettings, listen, admin, incarnation string) string {
	var b strings.Builder
	err := gatewayConfig.Execute(&b, struct {
		GatewaySettings
		Listen, Admin, Incarnation, AdminToken, HoldRoute, AsyncRoute string
	}{s, listen, admin, incarnation, adminToken, holdRoute, asyncRoute})
	if err != nil {
		panic(err) // the template is fixed and its data plain values
	}
	return b.String()
}

// gatewayConfig is configYAML's template; up is a route's upstreamURL.
var gatewayConfig = template.Must(template.New("gateway").Funcs(template.FuncMap{
	"q":  strconv.Quote,
	"up": upstreamURL,
}).Parse(`# chaos harness: gateway incarnation {{.Incarnation}}
server:
  listen: {{q .Listen}}
  shutdown_timeout: {{.Shutdown}}
  read_timeout: 5s
  write_timeout: 30s
admin:
  listen: {{q .Admin}}
  token: {{q .AdminToken}}
store:
  driver: postgres
  dsn: {{q .PostgresDSN}}
  max_open_conns: 8
  auto_migrate: false
  sweep_interval: 1m
  on_unavailable: {{.StoreFailMode}}
screen:
  driver: redis
  redis:
    addrs: [{{q .RedisAddr}}]
  prefix: "chaos:"
  lease: {{.Lease}}
  ttl: 24h
  local_cache: {{.LocalCache}}
  on_unavailable: store
telemetry:
  metrics:
    prometheus: true
  log:
    level: {{.LogLevel}}
    format: json
routes:
  # Stripe-style: key = json id, Stripe-Signature verified, repeats wait.
  - name: stripe
    path: /webhooks/stripe
    preset: stripe
    verify:
      secrets: [{{q .StripeSecret}}]
    upstream:
      url: {{q (up .UpstreamURL .Incarnation "stripe")}}
      timeout: {{.Timeout}}
    wait_timeout: {{.WaitTimeout}}
    source: header:X-Sender
  # The seed's classic key, business id + event + sequence; the sender is
  # its loopback address.
  - name: orders
    path: /webhooks/orders
    upstream:
      url: {{q (up .UpstreamURL .Incarnation "orders")}}
      timeout: {{.Timeout}}
    key:
      sources:
        - template: "{json:order_id}-{json:event}-{json:seq}"
    wait_timeout: {{.WaitTimeout}}
    source: ip
  # A prefix route keyed by a header; repeats in flight get 409 at once.
  - name: generic
    path: /hooks/*
    upstream:
      url: {{q (up .UpstreamURL .Incarnation "generic")}}
      timeout: {{.Timeout}}
    key:
      sources:
        - header: X-Event-Id
    inflight: reject
    source: header:X-Sender
  # Payouts must happen at most once: a forward that got no answer holds
  # its key until the harness's operator resolves it (admin API).
  - name: {{.HoldRoute}}
    path: /webhooks/payouts
    upstream:
      url: {{q (up .UpstreamURL .Incarnation .HoldRoute)}}
      timeout: {{.Timeout}}
    key:
      sources:
        - json: payout_id
    record:
      ambiguous: hold
    wait_timeout: {{.WaitTimeout}}
    source: header:X-Sender
{{- if .Async}}
  # Store-and-forward: stored, acknowledged at once, delivered by the queue.
  - name: {{.AsyncRoute}}
    path: /webhooks/relay
    delivery: async
    async:
      max_attempts: 1000
      backoff: {initial: 50ms, max: 2s}
      concurrency: 4
    upstream:
      url: {{q (up .UpstreamURL .Incarnation .AsyncRoute)}}
      timeout: {{.Timeout}}
    key:
      sources:
        - json: relay_id
    source: header:X-Sender
{{- end}}
`))

// upstreamURL is route's upstream for incarnation. The path names the
// gateway that took a delivery in, and the credentials (sent as Basic
// auth) the one that forwards it: an async route's stored path is its
// intake's, forwarded by any replica.
func upstreamURL(base, incarnation, route string) string {
	return strings.Replace(base, "://", "://"+incarnation+"@", 1) + "/g/" + incarnation + "/" + route
}

// GatewayProc is one gateway replica: a fixed listener and admin address,
// and a succession of processes (lives) of the real binary.
type GatewayProc struct {
	Index      int
	Name       string // "g1"
	ListenAddr string
	AdminAddr  string
	bin        string
	dir        string
	settings   GatewaySettings

	mu    sync.Mutex
	lives []*Life
	cur   *Life
	cmd   *exec.Cmd
	done  chan struct{}
}

func newGatewayProc(i int, bin, dir string, s GatewaySettings) (*GatewayProc, error) {
	lp, err := freePort()
	if err != nil {
		return nil, err
	}
	ap, err := freePort()
	if err != nil {
		return nil, err
	}
	return &GatewayProc{Index: i, Name: "g" + strconv.Itoa(i+1), bin: bin, dir: dir, settings: s,
		ListenAddr: "127.0.0.1:" + strconv.Itoa(lp), AdminAddr: "127.0.0.1:" + strconv.Itoa(ap)}, nil
}

// URL is the base URL providers deliver to.
func (g *GatewayProc) URL() string { return "http://" + g.ListenAddr }

// ConfigPath writes the configuration of incarnation name and returns its path.
func (g *GatewayProc) ConfigPath(name string) (string, error) {
	path := filepath.Join(g.dir, name+".yaml")
	if err := os.WriteFile(path, []byte(configYAML(g.settings, g.ListenAddr, g.AdminAddr, name)), 0o644); err != nil {
		return "", fmt.Errorf("write config: %w", err)
	}
	return path, nil
}

// Current is the running incarnation, or nil.
func (g *GatewayProc) Current() *Life {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.cur
}

// Serving is the running incarnation if it is ready and not being
// stopped, or nil.
func (g *GatewayProc) Serving() *Life {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == nil || g.cur.Ready.IsZero() || !g.cur.Stopping.IsZero() {
		return nil
	}
	return g.cur
}

// Lives are every incarnation so far, oldest first.
func (g *GatewayProc) Lives() []*Life {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Life(nil), g.lives...)
}

// Start runs a new incarnation and waits until it serves.
func (g *GatewayProc) Start() error {
	g.mu.Lock()
	if g.cur != nil {
		g.mu.Unlock()
		return fmt.Errorf("%s: already running", g.Name)
	}
	name := fmt.Sprintf("%s.%d", g.Name, len(g.lives)+1)
	g.mu.Unlock()
	cfg, err := g.ConfigPath(name)
	if err != nil {
		return err
	}
	life := &Life{Name: name, Gateway: g.Index, LogPath: filepath.Join(g.dir, name+".log")}
	logf, err := os.Create(life.LogPath)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	cmd := exec.Command(g.bin, "serve", "-config", cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	life.Start = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: start: %w", name, err)
	}
	life.PID = cmd.Process.Pid
	done := make(chan struct{})
	g.mu.Lock()
	g.lives = append(g.lives, life)
	g.cur, g.cmd, g.done = life, cmd, done
	g.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		logf.Close()
		g.mu.Lock()
		life.End = time.Now()
		life.ExitCode = cmd.ProcessState.ExitCode()
		if life.How == "" {
			life.How = "exited"
		}
		if g.cur == life {
			g.cur = nil
		}
		g.mu.Unlock()
		close(done)
	}()

	client := &http.Client{Timeout: 500 * time.Millisecond}
	err = poll(30*time.Second, 20*time.Millisecond, func() error {
		select {
		case <-done:
			return errExited
		default:
		}
		resp, err := client.Get(g.URL() + "/__chaos_ready")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		g.Kill()
		return fmt.Errorf("%s did not start serving: %w\n%s", name, err, tail(life.LogPath, 20))
	}
	g.mu.Lock()
	life.Ready = time.Now()
	g.mu.Unlock()
	return nil
}

var errExited = errors.New("process exited")

// Freeze stops life, the running incarnation, with SIGSTOP: it keeps its
// connections and holds its claims, and nothing of it runs (a long GC
// pause, a VM migrated, a container throttled to nothing).
func (g *GatewayProc) Freeze(life *Life) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur != life {
		return errors.New("not running")
	}
	if err := g.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	life.Frozen = append(life.Frozen, Stall{Start: time.Now()})
	return nil
}

// Thaw continues life after Freeze(life).
func (g *GatewayProc) Thaw(life *Life) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == life {
		_ = g.cmd.Process.Signal(syscall.SIGCONT)
	}
	life.Frozen[len(life.Frozen)-1].End = time.Now()
}

// Kill sends SIGKILL to the running incarnation and waits for it to die.
func (g *GatewayProc) Kill() {
	g.stop(syscall.SIGKILL, "killed", 0)
}

// Terminate sends SIGTERM and waits up to timeout for a graceful exit
// (then kills it). It returns the exit code, -1 if it had to be killed.
func (g *GatewayProc) Terminate(timeout time.Duration) int {
	return g.stop(syscall.SIGTERM, "terminated", timeout)
}

func (g *GatewayProc) stop(sig syscall.Signal, how string, timeout time.Duration) int {
	g.mu.Lock()
	life, cmd, done := g.cur, g.cmd, g.done
	if life == nil {
		g.mu.Unlock()
		return 0
	}
	life.Stopping, life.How = time.Now(), how
	g.mu.Unlock()
	_ = cmd.Process.Signal(sig)
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
			_ = cmd.Process.Kill()
			<-done
			return -1
		}
	}
	<-done
	g.mu.Lock()
	defer g.mu.Unlock()
	return life.ExitCode
}

// cleanEnv is the harness's environment without HOOKSTAMP_* variables,
// which would override the configuration written for each incarnation.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "HOOKSTAMP_") {
			env = append(env, kv)
		}
	}
	return env
}

// tail returns the last n lines of a file, for error messages.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Scrape is one reading of a gateway's /metrics.
type Scrape struct {
	Time time.Time
	// Present: the admin listener answered /metrics.
	Present bool
	// Takeovers is hookstamp_takeovers_total summed over routes; HasTakeovers
	// says whether the series exists.
	Takeovers, CommitFailures       float64
	HasTakeovers, HasCommitFailures bool
	// Goroutines is go_goroutines, when exported (HasGoroutines).
	Goroutines    float64
	HasGoroutines bool
}

// scrapeMetrics reads the admin listener's /metrics.
func scrapeMetrics(ctx context.Context, client *http.Client, adminAddr string) *Scrape {
	s := &Scrape{Time: time.Now()}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+adminAddr+"/metrics", nil)
	if err != nil {
		return s
	}
	resp, err := client.Do(req)
	if err != nil {
		return s
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return s
	}
	s.Present = true
	s.Takeovers, s.HasTakeovers = sumMetric(body, "hookstamp_takeovers_total")
	s.CommitFailures, s.HasCommitFailures = sumMetric(body, "hookstamp_commit_failures_total")
	s.Goroutines, s.HasGoroutines = sumMetric(body, "go_goroutines")
	return s
}

// sumMetric sums every series of one metric in Prometheus text format.
func sumMetric(text []byte, name string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(bytes.NewReader(text))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue // a longer name sharing the prefix
		}
		fields := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// rssBytes is the resident set size of a process, from /proc.
func rssBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) < 1 {
				break
			}
			kb, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS")
}

func discardLogger() *log.Logger { return log.New(io.Discard, "", 0) }
