// Package faults is flashgate's fault suite: the split deployment started as
// real processes on loopback (Redis primary and replica with AOF, PostgreSQL
// or SQLite, a control plane, two order sinks, two inventories and two
// gateways, all from one built bin/flashgate), a crowd of distinct buyers
// driven through it while one fault is injected, and an invariant check of
// what the crowd was told against Redis and the database afterwards.
//
// Its tests carry the build tag "faults", so `make test` does not run them;
// `make faults` does (FAULTS=<scenario> runs one). See docs/RELIABILITY.md.
// The history checker (history*.go) and its tests (TestModel…) carry no tag:
// every scenario's history is checked with it, and `make test` runs its
// hand-made histories.
package faults
