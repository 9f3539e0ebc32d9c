package loadbench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	_ "net/http/pprof" // the child's debug listener serves /debug/pprof
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/proxy"
	"github.com/valyala/fasthttp"

	"github.com/hookstamp/hookstamp/bench/peers/fiberidem"
	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/telemetry"
)

// Each system under test runs in a process of its own — the benchmark
// binary started again with "child" as its first argument — so that its
// CPU time, write system calls and peak RSS are read from /proc for it
// alone, apart from the load generator and the upstream. The gateway
// child runs internal/gateway exactly as cmd/gateway serve does.

// ChildMain runs a child: "gateway CONFIG_FILE", "proxy UPSTREAM_URL" or
// "fiberidem UPSTREAM_URL REDIS_ADDR PREFIX". It prints "ready ADDR
// DEBUG_ADDR" on stdout when it serves, and stops when its stdin closes
// (the parent exited or stopped it) or on SIGTERM.
func ChildMain(args []string) error {
	if len(args) < 2 {
		return fmt.Errorf("child: want KIND ARG..., got %q", args)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	dln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(dln, nil) }() // pprof

	switch args[0] {
	case "gateway":
		return childGateway(ctx, args[1], dln.Addr().String())
	case "proxy":
		return childProxy(ctx, args[1], dln.Addr().String())
	case "fiberidem":
		if len(args) != 4 {
			return fmt.Errorf("child: fiberidem wants UPSTREAM_URL REDIS_ADDR PREFIX, got %q", args[1:])
		}
		return childFiberIdem(ctx, fiberidem.Options{Upstream: args[1], RedisAddr: args[2], Prefix: args[3],
			KeyHeader: "X-Event-Id", Lifetime: time.Hour}, dln.Addr().String())
	}
	return fmt.Errorf("child: unknown kind %q", args[0])
}

func childGateway(ctx context.Context, path, debug string) error {
	cfg, err := config.Load(path, nil)
	if err != nil {
		return err
	}
	log := telemetry.NewLogger(cfg.Telemetry.Log, os.Stderr)
	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: log, Version: "bench"})
	if err != nil {
		return err
	}
	if err := g.Start(); err != nil {
		return err
	}
	fmt.Printf("ready %s %s\n", g.Addr(), debug)
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return g.Shutdown(sctx)
}

// childProxy is B0: a bare Fiber v2 reverse proxy (middleware/proxy) in
// front of the same upstream, with its own fasthttp client (not the
// package-global one) sized like the gateway's forwarder.
func childProxy(ctx context.Context, upstream, debug string) error {
	app := fiber.New(fiber.Config{DisableStartupMessage: true})
	client := &fasthttp.Client{MaxConnsPerHost: 4096, MaxIdleConnDuration: 30 * time.Second}
	app.All("/*", proxy.Forward(upstream+"/hook", client))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = app.Listener(ln) }()
	fmt.Printf("ready %s %s\n", ln.Addr().String(), debug)
	<-ctx.Done()
	return app.Shutdown()
}

// childFiberIdem is F1: Fiber's idempotency middleware on Redis storage in
// front of the same upstream (bench/peers/fiberidem).
func childFiberIdem(ctx context.Context, o fiberidem.Options, debug string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	app, err := fiberidem.Start(ln, o)
	if err != nil {
		return fmt.Errorf("fiberidem: %w", err)
	}
	fmt.Printf("ready %s %s\n", ln.Addr().String(), debug)
	<-ctx.Done()
	return app.Close()
}

// Child is a running child process.
type Child struct {
	Name  string
	Addr  string // host:port it serves on
	Debug string // host:port of its pprof listener
	Log   string // file holding its stderr
	cmd   *exec.Cmd
	stdin io.WriteCloser
	exit  chan error
}

// StartChild starts the benchmark binary (exe; "" = this one) as a child
// of the given kind and waits until it serves.
func StartChild(ctx context.Context, exe, dir, name, kind string, args ...string) (*Child, error) {
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(exe, append([]string{"child", kind}, args...)...)
	c, out, err := startCmd(cmd, dir, name, true)
	if err != nil {
		return nil, err
	}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 3 && f[0] == "ready" {
				c.Addr, c.Debug = f[1], f[2]
				ready <- nil
			}
		}
		ready <- errors.New("exited before it was ready")
		c.exit <- cmd.Wait()
	}()
	return c, c.await(ctx, ready)
}

// startCmd starts cmd with its stderr (and, unless piped, its stdout) in
// dir/name.log.
func startCmd(cmd *exec.Cmd, dir, name string, pipeOut bool) (*Child, io.Reader, error) {
	logPath := filepath.Join(dir, name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close() // the child holds its own descriptor
	cmd.Stderr = logf
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, nil, err
	}
	var out io.Reader
	if pipeOut {
		if out, err = cmd.StdoutPipe(); err != nil {
			return nil, nil, err
		}
	} else {
		cmd.Stdout = logf
	}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return &Child{Name: name, Log: logPath, cmd: cmd, stdin: stdin, exit: make(chan error, 1)}, out, nil
}

// await waits for ready, killing the child if it does not come.
func (c *Child) await(ctx context.Context, ready <-chan error) error {
	select {
	case err := <-ready:
		if err != nil {
			return fmt.Errorf("%s: %w (log: %s)\n%s", c.Name, err, c.Log, tail(c.Log))
		}
		return nil
	case <-time.After(60 * time.Second):
		_ = c.cmd.Process.Kill()
		return fmt.Errorf("%s: not ready after 60s (log: %s)", c.Name, c.Log)
	case <-ctx.Done():
		_ = c.cmd.Process.Kill()
		return ctx.Err()
	}
}

// PID is the child's process id.
func (c *Child) PID() int { return c.cmd.Process.Pid }

// Sample reads the /proc counters of the child and of its own children
// (nginx's workers).
func (c *Child) Sample() (ProcSample, error) { return SampleTree(c.PID()) }

// Exited says, without waiting, whether the child has exited, and its
// exit error (nil for status 0).
func (c *Child) Exited() (bool, error) {
	select {
	case err := <-c.exit:
		c.exit <- err // for Stop
		return true, err
	default:
		return false, nil
	}
}

// Stop asks the child to shut down and waits for it (killing it after 15s).
func (c *Child) Stop() {
	_ = c.stdin.Close()
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.exit:
	case <-time.After(15 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.exit
	}
}

// Profile fetches a CPU profile of d from the child's pprof listener.
func (c *Child) Profile(ctx context.Context, d time.Duration, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", c.Debug, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
