// Package loadbench measures hookstamp against its physical limits in one
// run (make bench, make bench-quick; docs/performance.md): on loopback, an
// upstream, a bare Fiber v2 proxy hop (B0), hookstamp in each
// configuration (B1–B5) and with store-and-forward (A1, whose queue's
// drain to the upstream is timed after each cell), the peers its users would otherwise run (N0:
// nginx's proxy hop; F1: Fiber's idempotency middleware on Redis), and the
// raw rates of PostgreSQL (L1: single-row INSERT transactions) and Redis
// (L2: SET NX), all driven by one load generator, interleaved round by
// round so that drift hits every system alike.
//
// Each system under test runs in a child process (this program started
// again, running internal/gateway as cmd/gateway does), so that its CPU
// time, write system calls and peak RSS are read from /proc for it alone.
// Closed-loop cells measure throughput at fixed concurrencies; open-loop
// cells send at a fixed rate and measure latency from each request's due
// time (no coordinated omission), into log-linear histograms (Hist).
//
// The report is a table on stdout, a JSON file whose top-level "ratios"
// object holds the goals' ratios, and a hand-written SVG chart.
package loadbench
