package sqldb

import "strings"

// migration is one schema version. Statements that differ between the
// dialects only in their column types are written once, in both, with
// {int}, {real} and {time} standing for the type (see ddlTypes); the rest,
// such as triggers, are written per dialect and run after them.
type migration struct {
	version  int
	both     []string
	postgres []string
	sqlite   []string
}

// ddlTypes are the column types each dialect gives a placeholder of a
// migration's shared statements. On PostgreSQL timestamps are timestamptz;
// on SQLite they are integer unix microseconds (UTC), so that ordering and
// comparisons work in SQL.
var ddlTypes = map[string]*strings.Replacer{
	DialectPostgres: strings.NewReplacer("{int}", "BIGINT", "{real}", "DOUBLE PRECISION", "{time}", "TIMESTAMPTZ"),
	DialectSQLite:   strings.NewReplacer("{int}", "INTEGER", "{real}", "REAL", "{time}", "INTEGER"),
}

// statements returns m's statements for dialect, in the order they run.
func (m migration) statements(dialect string) []string {
	out := make([]string, 0, len(m.both)+len(m.postgres)+len(m.sqlite))
	for _, q := range m.both {
		out = append(out, ddlTypes[dialect].Replace(q))
	}
	if dialect == DialectPostgres {
		return append(out, m.postgres...)
	}
	return append(out, m.sqlite...)
}

// migrations are applied in order, each once, recorded in schema_migrations.
// Never edit an applied migration: add a new one.
//
// Version 1 is docs/api.md's schema plus two columns of sales that its
// original table did not list: admit_ratio (the admission cap is total ×
// admit_ratio) and per_user (the most units one user may hold).
var migrations = []migration{
	{
		version: 1,
		both: []string{
			`CREATE TABLE IF NOT EXISTS sales (
				id          TEXT PRIMARY KEY,
				name        TEXT NOT NULL,
				price_cents {int} NOT NULL,
				total       {int} NOT NULL,
				starts_at   {time},
				ends_at     {time},
				state       TEXT NOT NULL DEFAULT 'upcoming',
				admit_ratio {real} NOT NULL DEFAULT 1.5,
				per_user    {int} NOT NULL DEFAULT 1
			)`,
			`CREATE TABLE IF NOT EXISTS orders (
				order_id    TEXT PRIMARY KEY,
				sale_id     TEXT NOT NULL,
				user_id     TEXT NOT NULL,
				quantity    {int} NOT NULL,
				price_cents {int} NOT NULL,
				status      TEXT NOT NULL,
				created_at  {time} NOT NULL,
				updated_at  {time} NOT NULL
			)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS orders_live_user ON orders (sale_id, user_id)
				WHERE status IN ('pending_payment', 'paid')`,
			`CREATE INDEX IF NOT EXISTS orders_sale_status ON orders (sale_id, status)`,
			`CREATE INDEX IF NOT EXISTS orders_status_created ON orders (status, created_at, order_id)`,
		},
	},
	{
		// Version 2 keeps the bookkeeping of each sale flat as the sale
		// grows (see docs/internals.md, "Bookkeeping that stays flat"):
		// order_counts holds rows and units per (sale, status) and
		// release_queue every order that left a live status and whose
		// release a re-sync has not yet delivered to Redis; release_sync
		// counts the deliveries. Triggers keep all three in the transaction
		// of every row change, whoever makes it; the counts are filled from
		// the rows that exist, under a lock that holds writers off meanwhile.
		version:  2,
		postgres: bookkeepingPostgres,
		sqlite:   bookkeepingSQLite,
	},
	{
		// Version 3 stores the bucket layout of a sale (buckets, and the
		// salts of the buckets' hash tags, comma-separated) and the bucket
		// each order's units came from; an unbucketed sale has buckets 1,
		// no salts, and its orders bucket 0.
		version: 3,
		postgres: []string{
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS buckets INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS bucket_salts TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN IF NOT EXISTS bucket INTEGER NOT NULL DEFAULT 0`,
		},
		sqlite: []string{
			`ALTER TABLE sales ADD COLUMN buckets INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN bucket_salts TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN bucket INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 4 drops SQLite's row trigger on INSERT: InsertOrders, the
		// only writer of new rows, counts its rows and queues released ones
		// once per (sale, status) per batch in its own transaction, which
		// costs a fraction of a trigger program run for every row (see
		// docs/internals.md, "The order sink's inserts"). The UPDATE and
		// DELETE triggers stay. PostgreSQL keeps its statement-level
		// trigger, which already counts once per statement.
		version: 4,
		sqlite:  []string{`DROP TRIGGER IF EXISTS orders_count_insert`},
	},
	{
		// Version 5 marks the sales that ended and settled (archived = 1):
		// the control plane's periodic passes and the lookup of orders not
		// yet stored read only the others, through the partial index, so
		// their cost does not grow with past sales (docs/internals.md,
		// "Archived sales").
		version: 5,
		both: []string{
			`ALTER TABLE sales ADD COLUMN archived {int} NOT NULL DEFAULT 0`,
			`CREATE INDEX IF NOT EXISTS sales_live ON sales (id) WHERE archived = 0`,
		},
	},
	{
		// Version 6 holds the leader fence: the highest fencing token a
		// write of the control plane's loops carried (see raiseFence). A
		// write with a lower token changes nothing.
		version: 6,
		both: []string{
			`CREATE TABLE IF NOT EXISTS leader_fence (
				id    {int} PRIMARY KEY,
				token {int} NOT NULL
			)`,
			`INSERT INTO leader_fence (id, token) VALUES (1, 0) ON CONFLICT (id) DO NOTHING`,
		},
	},
	{
		// Version 7 stores a sale's fair-queue settings (docs/api.md, "Fair
		// queue"): queue is "" (first come) or "fair"; zeros mean defaults,
		// challenge_auto is 1 (true) or 0.
		version: 7,
		postgres: []string{
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS queue TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS prequeue_seconds INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS challenge_maxnumber BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS challenge_auto INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS admit_per_minute BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN IF NOT EXISTS admit_seconds INTEGER NOT NULL DEFAULT 0`,
		},
		sqlite: []string{
			`ALTER TABLE sales ADD COLUMN queue TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE sales ADD COLUMN prequeue_seconds INTEGER NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN challenge_maxnumber BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN challenge_auto INTEGER NOT NULL DEFAULT 1`,
			`ALTER TABLE sales ADD COLUMN admit_per_minute BIGINT NOT NULL DEFAULT 0`,
			`ALTER TABLE sales ADD COLUMN admit_seconds INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 8 journals fair queues (docs/internals.md, "Fair queue
		// journal"): one mark a queue (its epoch, seed commitment,
		// frontiers and open windows) and its entrants, so that a rebuild
		// of the sale restores the queue.
		version: 8,
		both: []string{
			`CREATE TABLE IF NOT EXISTS queue_marks (
				sale_id  TEXT PRIMARY KEY,
				epoch    TEXT NOT NULL,
				seed_sha TEXT NOT NULL,
				k        {int} NOT NULL DEFAULT 0,
				e        {int} NOT NULL DEFAULT 0,
				windows  TEXT NOT NULL DEFAULT ''
			)`,
			`CREATE TABLE IF NOT EXISTS queue_entrants (
				sale_id TEXT NOT NULL,
				user_id TEXT NOT NULL,
				entry   TEXT NOT NULL,
				PRIMARY KEY (sale_id, user_id)
			)`,
		},
	},
	{
		// Version 9 keeps payments at a provider (docs/api.md, "Payments"),
		// and a sale's currency ('' = the deployment's):
		// payments holds one payment per order (its PaymentIntent, the
		// intent's last known status, what flashgate made of a success:
		// outcome, and refunds and disputes), payment_events each webhook
		// event id once, so that a redelivered event changes nothing.
		version: 9,
		both: []string{
			`ALTER TABLE sales ADD COLUMN currency TEXT NOT NULL DEFAULT ''`,
			`CREATE TABLE IF NOT EXISTS payments (
				order_id     TEXT PRIMARY KEY,
				intent_id    TEXT NOT NULL UNIQUE,
				status       TEXT NOT NULL,
				outcome      TEXT NOT NULL DEFAULT '',
				amount_cents {int} NOT NULL,
				currency     TEXT NOT NULL,
				refund_id    TEXT NOT NULL DEFAULT '',
				refunded     {int} NOT NULL DEFAULT 0,
				disputed     {int} NOT NULL DEFAULT 0,
				created_at   {time} NOT NULL,
				updated_at   {time} NOT NULL
			)`,
			`CREATE INDEX IF NOT EXISTS payments_open ON payments (outcome, status)`,
			`CREATE TABLE IF NOT EXISTS payment_events (
				event_id    TEXT PRIMARY KEY,
				type        TEXT NOT NULL,
				intent_id   TEXT NOT NULL,
				order_id    TEXT NOT NULL DEFAULT '',
				received_at {time} NOT NULL
			)`,
		},
	},
	{
		// Version 10 stores the variants of a sale sold in several (a JSON
		// array of {id, name, total}; '' for a sale of one stock) and the
		// variant each order's units came from ('' for a sale of one stock).
		version: 10,
		both: []string{
			`ALTER TABLE sales ADD COLUMN variants TEXT NOT NULL DEFAULT ''`,
			`ALTER TABLE orders ADD COLUMN variant TEXT NOT NULL DEFAULT ''`,
		},
	},
	{
		// Version 11 keeps the bookkeeping of a sale sold in variants flat
		// too: variant_counts holds rows and units per (sale, variant,
		// status) of the rows that name a variant, kept by triggers in the
		// transaction of every row change as order_counts is, and filled
		// from the rows that exist under a lock that holds writers off.
		version:  11,
		postgres: variantCountsPostgres,
		sqlite:   variantCountsSQLite,
	},
	{
		// Version 12 makes a payment's steps owned and its reconciliation
		// scale (docs/internals.md, "Late payments"): retakes holds the
		// units each late payment took again in Redis, which the figures
		// count among the persisted units (Redis counts them as reserved);
		// a payment's next_check_at and checks are the reconciliation's
		// backoff (NULL: due now).
		version: 12,
		both: []string{
			`CREATE TABLE IF NOT EXISTS retakes (
				order_id   TEXT PRIMARY KEY,
				sale_id    TEXT NOT NULL,
				bucket     {int} NOT NULL DEFAULT 0,
				variant    TEXT NOT NULL DEFAULT '',
				quantity   {int} NOT NULL,
				created_at {time} NOT NULL
			)`,
			`CREATE INDEX IF NOT EXISTS retakes_sale ON retakes (sale_id)`,
			`ALTER TABLE payments ADD COLUMN next_check_at {time}`,
			`ALTER TABLE payments ADD COLUMN checks {int} NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 13 keeps draws (docs/api.md, "Draws"): a draw sale's
		// entry window (NULL for other sales; its queue column is 'draw')
		// and draw_entries, one row per entry (flashgate.DrawEntry), at
		// most one live one (pending or entered) per (sale, user).
		version: 13,
		both: []string{
			`ALTER TABLE sales ADD COLUMN entries_open_at {time}`,
			`ALTER TABLE sales ADD COLUMN entries_close_at {time}`,
			`CREATE TABLE IF NOT EXISTS draw_entries (
				entry_id       TEXT PRIMARY KEY,
				sale_id        TEXT NOT NULL,
				user_id        TEXT NOT NULL,
				variant        TEXT NOT NULL DEFAULT '',
				quantity       {int} NOT NULL,
				state          TEXT NOT NULL,
				payment_intent TEXT NOT NULL DEFAULT '',
				order_id       TEXT NOT NULL DEFAULT '',
				created_at     {time} NOT NULL,
				updated_at     {time} NOT NULL
			)`,
			`CREATE INDEX IF NOT EXISTS draw_entries_sale ON draw_entries (sale_id, state)`,
			`CREATE UNIQUE INDEX IF NOT EXISTS draw_entries_live ON draw_entries (sale_id, user_id)
				WHERE state IN ('pending', 'entered')`,
		},
	},
	{
		// Version 14 records a late payment's retake before Redis makes
		// it (docs/internals.md, "A retaken unit survives a rebuild"): a
		// retakes row with pending = 1 is written before the retake and
		// becomes 0 in the honour step (or goes in the refund's first
		// step). The figures count only rows with pending = 0; a rebuild
		// of the sale in Redis holds the units of the pending ones.
		version: 14,
		both: []string{
			`ALTER TABLE retakes ADD COLUMN pending {int} NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 15 keeps each draw's entries file (draw.File's text
		// form), written once at the draw's close before any entry moves,
		// so that a close run again, by any leader, settles the same draw;
		// done is 1 once the close finished.
		version: 15,
		both: []string{
			`CREATE TABLE IF NOT EXISTS draw_files (
				sale_id    TEXT PRIMARY KEY,
				body       TEXT NOT NULL,
				done       {int} NOT NULL DEFAULT 0,
				created_at {time} NOT NULL
			)`,
		},
	},
	{
		// Version 16 keeps second charges (flashgate.SecondCharge): intents
		// whose metadata names an order whose payment is another intent,
		// each once, with what the reconciliation made of it (canceled,
		// refunded) and its backoff, so that an intent adopted as one is
		// never listed as unadopted again.
		version: 16,
		both: []string{
			`CREATE TABLE IF NOT EXISTS second_charges (
				intent_id     TEXT PRIMARY KEY,
				order_id      TEXT NOT NULL,
				status        TEXT NOT NULL,
				outcome       TEXT NOT NULL DEFAULT '',
				amount_cents  {int} NOT NULL,
				currency      TEXT NOT NULL,
				refund_id     TEXT NOT NULL DEFAULT '',
				created_at    {time} NOT NULL,
				updated_at    {time} NOT NULL,
				next_check_at {time},
				checks        {int} NOT NULL DEFAULT 0
			)`,
			`CREATE INDEX IF NOT EXISTS second_charges_open ON second_charges (outcome, next_check_at)`,
		},
	},
	{
		// Version 17 orders a draw entry's changes stamped in one
		// millisecond (flashgate.DrawEntry.Seq): two flushes of a draw's
		// journal at once (the leader's tick and a close) wrote an entry's
		// pending after its entered, both of one millisecond, and the entry
		// was left out of the draw.
		version: 17,
		postgres: []string{
			`ALTER TABLE draw_entries ADD COLUMN IF NOT EXISTS seq BIGINT NOT NULL DEFAULT 0`,
		},
		sqlite: []string{
			`ALTER TABLE draw_entries ADD COLUMN seq INTEGER NOT NULL DEFAULT 0`,
		},
	},
	{
		// Version 18 records a draw's close reading its rows
		// (DB.DrawClosing), once its final flush of the journal is done:
		// a flush that read the journal before Redis lost it and writes
		// after that leaves out the entries' moves to entered, which the
		// close, its draw made from the rows, can no longer act on.
		version: 18,
		both: []string{
			`CREATE TABLE IF NOT EXISTS draw_closes (
				sale_id    TEXT PRIMARY KEY,
				closing_at {time} NOT NULL
			)`,
		},
	},
}

// The statuses whose rows hold units, and those whose units went back.
const (
	liveStatuses     = `('pending_payment', 'paid')`
	releasedStatuses = `('cancelled', 'expired', 'refunded')`
)
