// Package explore is the interleaving explorer: random schedules of every
// actor that touches an order (buyers, the payment provider and its
// webhooks, the leader's reconciliation and expiry, the re-sync, admin
// refunds, a FLUSHALL, a process killed between two steps; in a draw
// sale's schedules its entrants, card holds, journal and close), run one step
// at a time over real Redis and SQLite or PostgreSQL, each a function of
// its seed, and judged at rest against the invariants of units and money.
// Everything is in its tests; docs/internals.md ("The interleaving
// explorer") tells how to run it, replay a seed and add an actor.
package explore
