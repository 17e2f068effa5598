// Package loadtest runs the example server as real processes and drives
// load at them: what the load tool (tools/cmd/gatecount-load, in a module
// of its own), the example's tests and the fault tests share.
//
// Build compiles examples/stdlib once. StartCluster starts N servers on
// free loopback ports over one store, and stops them on Close. Each gets a
// fresh GATECOUNT_SECRET, so that runs never share counts. Run sends POST
// /execute from many clients as many callers, and returns what it saw. That
// is latencies, statuses, errors by kind, and each caller's admissions in
// each budget window, which Result.Check holds against the budget.
// LoadConfig.Request sends another route instead (GET /health, POST /login
// from chosen addresses). Burst sends N requests of one caller at once, the
// load tool's burst mode, and Result.CheckBurst holds them to exactly the
// budget admitted and the rest refused with 429.
//
// Load only ever goes to loopback addresses: Run refuses any other target.
//
// The tests of this package are the fault runs: a server killed with
// SIGKILL under load over PostgreSQL, the store's connection cut and
// black-holed under an in-process server, and a flood of distinct keys
// against the bounded memory store. They are short by default; set
// GATECOUNT_LONG=1 (or pass -long) for the full-size runs.
package loadtest
