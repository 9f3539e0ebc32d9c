// Command chaos runs hookstamp's chaos and soak harness (package
// internal/chaos): three real gateway processes, their own Redis and
// PostgreSQL database behind fault-injecting proxies, simulated
// at-least-once providers and a recording upstream, a fault schedule drawn
// from -seed, and an audit of exactly-once at the end.
//
//	chaos [-seed N] [-duration 2m] [-faults all|none|k1,k2] [-inbox] [-soak] [-keep] [-work DIR]
//
// It prints the report and exits 1 on any violation, 2 when the harness
// itself could not run.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hookstamp/hookstamp/internal/chaos"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if err != nil {
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := chaos.Run(ctx, o)
	if rep != nil {
		rep.Write(stdout)
	}
	if err != nil {
		fmt.Fprintln(stderr, "chaos: the harness could not complete:", err)
		return 2
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// parse reads the command line into a run's options, saying what is wrong
// with it on stderr.
func parse(args []string, stderr io.Writer) (chaos.Options, error) {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o chaos.Options
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the fault schedule and of every provider's events (0: from the clock; printed)")
	fs.DurationVar(&o.Duration, "duration", 2*time.Minute, "how long providers send new events; faults happen within it")
	fs.DurationVar(&o.Drain, "drain", 60*time.Second, "how long providers may take to settle their last events")
	faults := fs.String("faults", "all", "fault kinds: all, none, or a comma-separated list")
	fs.DurationVar(&o.FaultSpacing, "fault-spacing", 0, "mean quiet time between faults (default 2.5s; -soak: 20s)")
	fs.IntVar(&o.Senders, "senders", 18, "independent senders, spread over the routes (five, or four with -async=false)")
	fs.DurationVar(&o.Think, "think", 150*time.Millisecond, "a sender's mean pause between events")
	fs.DurationVar(&o.Lease, "lease", 3*time.Second, "screen.lease of the gateways")
	fs.DurationVar(&o.Timeout, "timeout", time.Second, "upstream.timeout of every route")
	fs.BoolVar(&o.StorePass, "store-pass", false, "run the gateways with store.on_unavailable: pass")
	fs.BoolVar(&o.Inbox, "inbox", false, "the upstream applies effects through the inbox library in a PostgreSQL database of its own; the audit counts effects")
	fs.BoolVar(&o.Async, "async", true, "add a store-and-forward route (delivery: async); the audit checks every acknowledged event reached the upstream once")
	fs.StringVar(&o.GatewayBin, "gateway", "", "gateway binary (default: go build ./cmd/gateway)")
	fs.BoolVar(&o.Race, "race", false, "build the gateway with the race detector (not with -gateway); a reported race is a violation")
	fs.DurationVar(&o.MaxHold, "max-hold", 0, "cap on how long each fault lasts (default: each kind's own range, up to 5s)")
	fs.StringVar(&o.WorkDir, "work", "", "directory for logs and artifacts (default: a temporary one, kept on failure)")
	fs.BoolVar(&o.Keep, "keep", false, "keep the temporary work directory after a clean run")
	fs.StringVar(&o.PostgresAdminDSN, "pg", "", "PostgreSQL admin DSN to create the run's database on (default $HOOKSTAMP_TEST_PG or postgres://postgres@127.0.0.1:5432/test)")
	fs.BoolVar(&o.Soak, "soak", false, "soak: steady mixed load, sparse faults that keep the processes alive, RSS and goroutines must stay flat")
	fs.DurationVar(&o.SampleEvery, "sample", 0, "resource sampling interval (default 1s; -soak: 5s)")
	quiet := fs.Bool("q", false, "no progress lines, only the report")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("unexpected argument %q", fs.Arg(0))
		fmt.Fprintln(stderr, "chaos:", err)
		return o, err
	}
	var err error
	if o.Faults, err = chaos.ParseFaults(*faults); err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return o, err
	}
	if o.Soak {
		if *faults == "all" {
			o.Faults = chaos.SoakFaults
		}
		if o.FaultSpacing == 0 {
			o.FaultSpacing = 20 * time.Second
		}
		if o.SampleEvery == 0 {
			o.SampleEvery = 5 * time.Second
		}
	}
	if !*quiet {
		o.Progress = stderr
	}
	return o, nil
}
