// Command gateway runs hookstamp, the webhook idempotency gateway.
//
//	gateway [serve] [-config FILE] [-demo-upstream ADDR]
//	gateway check   [-config FILE]
//	gateway migrate [-config FILE]
//	gateway version
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/demo"
	"github.com/hookstamp/hookstamp/internal/gateway"
	"github.com/hookstamp/hookstamp/internal/idempotency/sqlledger"
	"github.com/hookstamp/hookstamp/internal/telemetry"
)

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("gateway "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", defaultConfigPath(environ), "configuration file (HOOKSTAMP_CONFIG)")
	var demoAddr *string
	if cmd == "serve" {
		demoAddr = fs.String("demo-upstream", "", "also serve a demo upstream that logs what it receives on this address (for trying hookstamp out)")
	}
	switch cmd {
	case "serve", "check", "migrate":
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return 0 // -h asked for the usage, which was printed
			}
			return 2
		}
		if fs.NArg() > 0 {
			// "gateway -config f.yaml check" would otherwise serve.
			fmt.Fprintf(stderr, "gateway %s: unexpected argument %q (the command comes first: gateway check -config FILE)\n", cmd, fs.Arg(0))
			return 2
		}
	case "version":
		fmt.Fprintln(stdout, "hookstamp", version)
		return 0
	case "help": // -h and --help reach the flag set above, which prints its usage
		usage(stdout)
		return 0
	default:
		fmt.Fprintf(stderr, "gateway: unknown command %q\n", cmd)
		usage(stderr)
		return 2
	}

	cfg, err := config.Load(*path, environ)
	if err != nil {
		fmt.Fprintf(stderr, "gateway: invalid configuration %s:\n%v\n", *path, err)
		return 1
	}
	switch cmd {
	case "check":
		out, err := cfg.YAML()
		if err != nil {
			fmt.Fprintf(stderr, "gateway check: %v\n", err)
			return 1
		}
		for _, w := range cfg.Warnings(time.Now()) {
			fmt.Fprintf(stderr, "gateway check: warning: %s\n", w)
		}
		fmt.Fprintf(stdout, "# %s: valid. Effective configuration, secrets redacted:\n%s", *path, out)
		return 0
	case "migrate":
		if err := migrate(cfg); err != nil {
			fmt.Fprintf(stderr, "gateway migrate: %v\n", err)
			return 1
		}
		fmt.Fprintln(stdout, "ledger schema is up to date")
		return 0
	}

	log := telemetry.NewLogger(cfg.Telemetry.Log, stderr)
	telemetry.LogErrors(log)
	redis.SetLogger(telemetry.RedisLogger(log))
	for _, w := range cfg.Warnings(time.Now()) {
		log.Warn("configuration warning", "detail", w)
	}
	ctx, abandon, stop := stopSignals(log, cfg.Server.ShutdownTimeout)
	defer stop()
	if *demoAddr != "" {
		demoToken(cfg, stderr)
	}
	if err := serve(ctx, cfg, log, *demoAddr, abandon); err != nil {
		log.Error("gateway stopped", "err", err)
		return 1
	}
	return 0
}

// stopSignals turns SIGTERM and SIGINT into the end of ctx (drain within
// drain, then exit) and a second one into a close of abandon: the drain
// ends at once, its deliveries cut and their claims released. Without it
// the second signal was swallowed, and an operator who would not wait had
// only SIGKILL, which leaves claims in flight to expire with their lease.
// A third one ends the process, as Go does by default, for a stop that
// still takes too long (each store call is bounded, not their sum).
func stopSignals(log *slog.Logger, drain time.Duration) (ctx context.Context, abandon <-chan struct{}, stop func()) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(context.Background())
	ab := make(chan struct{})
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Info("stop signal: draining in-flight deliveries (a second signal abandons them)", "signal", s.String(), "shutdown_timeout", drain.String())
			cancel()
		case <-done:
			return
		}
		select {
		case s := <-sigs:
			signal.Stop(sigs)
			log.Warn("second stop signal: abandoning in-flight deliveries now; their claims are released (a third signal ends the process at once)", "signal", s.String())
			close(ab)
		case <-done:
		}
	}()
	return ctx, ab, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
}

func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, demoAddr string, abandon <-chan struct{}) error {
	if demoAddr != "" {
		ln, err := net.Listen("tcp", demoAddr)
		if err != nil {
			return fmt.Errorf("demo upstream: %w", err)
		}
		up := demo.New(log.With("component", "demo-upstream"))
		go func() { _ = up.Serve(ln) }()
		defer up.Close()
		log.Info("demo upstream listening", "addr", ln.Addr().String())
	}
	g, err := gateway.New(ctx, cfg, gateway.Options{Logger: log, Version: version})
	if err != nil {
		if ctx.Err() != nil {
			// SIGTERM while starting (waiting for another replica's
			// migration, say): a stop asked for, not a failure.
			log.Info("SIGTERM while starting: stopped before serving", "reason", err.Error())
			return nil
		}
		return err
	}
	return g.RunAbandoning(ctx, abandon)
}

// demoToken gives a demo run (-demo-upstream) without an admin token a
// fresh one, printed with the console's address, so that a newcomer can
// open the console at once. A configured token is never printed.
func demoToken(cfg *config.Config, stderr io.Writer) {
	if cfg.Admin.Token != "" || cfg.Admin.Listen == "" {
		return
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	cfg.Admin.Token = hex.EncodeToString(b)
	console := ""
	if cfg.Admin.Console {
		console = fmt.Sprintf("\n  operator console: http://%s/ui/ (sign in with the token)", cfg.Admin.Listen)
	}
	fmt.Fprintf(stderr, "demo: admin token for this run: %s%s\n  admin API: curl -H 'Authorization: Bearer %s' http://%s/admin/stats\n"+
		"  (set HOOKSTAMP_ADMIN_TOKEN to choose the token yourself)\n", cfg.Admin.Token, console, cfg.Admin.Token, cfg.Admin.Listen)
}

func migrate(cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	l, err := sqlledger.Open(ctx, sqlledger.Options{Driver: cfg.Store.Driver, DSN: cfg.Store.DSN, MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer l.Close()
	if err := gateway.MigrateStore(ctx, l); err != nil {
		return err
	}
	return gateway.MigrateTLS(ctx, cfg)
}

func defaultConfigPath(environ []string) string {
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "HOOKSTAMP_CONFIG="); ok && v != "" {
			return v
		}
	}
	return "config.yaml"
}

func usage(w io.Writer) {
	fmt.Fprint(w, `usage:
  gateway [serve] [-config FILE] [-demo-upstream ADDR]   serve (config defaults to ./config.yaml or $HOOKSTAMP_CONFIG)
  gateway check   [-config FILE]   validate and print the effective configuration, secrets redacted
  gateway migrate [-config FILE]   create or upgrade the ledger schema and exit
  gateway version                  print the version
`)
}
