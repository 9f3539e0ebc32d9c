// Package chaos is hookstamp's chaos and soak harness: it proves the
// exactly-once contract end to end, against the real gateway binary.
//
// Run starts a deployment on loopback — three gateway processes, a Redis of
// its own and a PostgreSQL database of its own, both reached through
// fault-injecting TCP proxies, and an upstream that records every request it
// receives in an fsynced log — and drives it with simulated providers that
// deliver the way at-least-once senders do: resends after timeouts, 409s and
// 5xx, jittered duplicates, late duplicates after an acknowledgement, a key
// reused with a different body, forged signatures. Meanwhile a fault
// schedule, drawn from a printed seed, kills and restarts gateways
// mid-forward, cuts, slows, flushes and restarts Redis, cuts and slows
// PostgreSQL, makes the upstream slow, failing or unresponsive, and rolls a
// SIGTERM restart through all three gateways.
//
// Afterwards the auditor compares what the upstream applied (its log) with
// what the providers were told (their records) and what the ledger holds
// (hookstamp_records), and reports every violation of the guarantees listed
// in docs/exactly-once.md. A duplicate delivery is a violation unless it is
// explained by the one documented exception — a lease takeover after the
// owning gateway crashed, carrying the same Idempotency-Key — or by a
// setting that documents at-least-once behaviour (record.ambiguous:
// release, store.on_unavailable: pass).
//
// cmd/chaos runs it from the command line (make chaos, make soak);
// TestChaosShort runs a short schedule inside make test.
package chaos
