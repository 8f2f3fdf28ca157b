package controlplane

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// fairEnv creates a fair sale of total units starting in a minute, opens
// its queue (the clock at the opening) and enters n users u0000…; it
// returns the sale and a fencing token.
func fairEnv(t *testing.T, e *env, id string, total int64, n int, mod func(*flashgate.Sale)) (flashgate.Sale, int64) {
	t.Helper()
	starts := e.clock.Now().Add(time.Minute)
	s := flashgate.Sale{ID: id, Name: "Fair", PriceCents: 1, Total: total, StartsAt: &starts, Queue: flashgate.QueueFair, AdmitSeconds: 30}
	if mod != nil {
		mod(&s)
	}
	sale, err := e.svc.CreateSale(e.ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	fence, err := e.rdb.Incr(e.ctx, lua.FenceKey()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
		t.Fatal(err)
	}
	if err := lua.QueueEnter.Load(e.ctx, e.rdb).Err(); err != nil {
		t.Fatal(err)
	}
	pipe := e.rdb.Pipeline()
	for i := range n {
		lua.QueueEnter.Run(e.ctx, pipe, lua.QueueEnterKeys(id, "none"), fmt.Sprintf("u%04d", i), 0)
	}
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	return sale, fence
}

// TestQueueSeedNotInRedisBeforeStart: from the opening to the start no key
// or field in Redis holds the seed (a gateway's credentials read it all);
// the seed revealed at the start hashes to the commitment published at the
// opening.
func TestQueueSeedNotInRedisBeforeStart(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	sale, fence := fairEnv(t, e, "fs", 5, 3, nil)
	var before []string
	for _, k := range e.rdb.Keys(e.ctx, "*").Val() {
		switch e.rdb.Type(e.ctx, k).Val() {
		case "hash":
			for f, v := range e.rdb.HGetAll(e.ctx, k).Val() {
				before = append(before, f+"="+v)
			}
		case "string":
			before = append(before, e.rdb.Get(e.ctx, k).Val())
		case "list":
			before = append(before, e.rdb.LRange(e.ctx, k, 0, -1).Val()...)
		}
	}
	e.clock.Set(*sale.StartsAt)
	if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
		t.Fatal(err)
	}
	v := e.rdb.HMGet(e.ctx, lua.SaleKey("fs"), lua.FieldQueueSeed, lua.FieldQueueSeedSHA).Val()
	seed, _ := v[0].(string)
	raw, err := hex.DecodeString(seed)
	if err != nil || len(raw) != 32 {
		t.Fatalf("revealed seed %q: want 64 hex characters", seed)
	}
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != v[1] {
		t.Errorf("seed %s hashes to %x, want the commitment %v", seed, sum, v[1])
	}
	for _, b := range before {
		if strings.Contains(b, seed) {
			t.Errorf("before the start Redis held the seed: %q", b)
		}
	}
}

// TestQueueResyncKeepsFair: a fair sale that Redis lost is rebuilt by the
// re-sync with queue=fair, so reserves keep checking admission.
func TestQueueResyncKeepsFair(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	fairEnv(t, e, "fr", 5, 3, nil)
	if err := e.rdb.FlushAll(e.ctx).Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // the rebuild, then the pass that reopens it
		if _, _, err := e.svc.Resync(e.ctx, "fr"); err != nil {
			t.Fatalf("re-sync %d: %v", i, err)
		}
		if got := e.rdb.HGet(e.ctx, lua.SaleKey("fr"), lua.FieldQueue).Val(); got != flashgate.QueueFair {
			t.Errorf("after re-sync %d: got queue %q, want %q", i, got, flashgate.QueueFair)
		}
	}
}

// TestQueueLeaderChangeKeepsWindows: a new leader ends the windows the old
// one opened when they end, not admit_seconds after it first saw them.
func TestQueueLeaderChangeKeepsWindows(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	sale, fence := fairEnv(t, e, "fw", 2, 4, nil) // admit_seconds 30
	e.clock.Set(*sale.StartsAt)
	if err := e.svc.Start(e.ctx, "fw"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
		t.Fatal(err)
	}
	figs := func() []any {
		return e.rdb.HMGet(e.ctx, lua.SaleKey("fw"), lua.FieldQueueAdmitted, lua.FieldQueueExpired).Val()
	}
	if got := figs(); got[0] != "2" || got[1] != "0" {
		t.Fatalf("at the start: got queue_admitted, queue_expired %v, want 2, 0", got)
	}
	svc2, err := New(Config{Redis: e.rdb, Store: e.db, Releaser: e.rel, AdminToken: testToken, Clock: e.clock, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	fence2 := e.rdb.Incr(e.ctx, lua.FenceKey()).Val()
	e.clock.Add(20 * time.Second)
	if err := svc2.QueueStep(e.ctx, sale, fence2); err != nil { // the new leader's first step
		t.Fatal(err)
	}
	e.clock.Add(10 * time.Second) // 30 s after the admission
	if err := svc2.QueueStep(e.ctx, sale, fence2); err != nil {
		t.Fatal(err)
	}
	if got := figs(); got[0] != "4" || got[1] != "2" {
		t.Errorf("30 s after the admission, under a new leader: got queue_admitted, queue_expired %v, want 4, 2", got)
	}
}

// TestQueueArchiveDropsKeys: archiving a fair sale takes its queue's keys
// out of Redis, and gives back the memory its entrants held.
func TestQueueArchiveDropsKeys(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	mem := func() int64 {
		t.Helper()
		for _, l := range strings.Split(e.rdb.Info(e.ctx, "memory").Val(), "\r\n") {
			if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
				var n int64
				fmt.Sscan(v, &n)
				return n
			}
		}
		t.Fatal("no used_memory in INFO memory")
		return 0
	}
	const n = 20_000
	m0 := mem()
	sale, fence := fairEnv(t, e, "fa", 5, n/2, nil)
	e.clock.Set(*sale.StartsAt)
	if err := e.svc.Start(e.ctx, "fa"); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
		t.Fatal(err)
	}
	pipe := e.rdb.Pipeline()
	for i := n / 2; i < n; i++ { // late entrants
		lua.QueueEnter.Run(e.ctx, pipe, lua.QueueEnterKeys("fa", "none"), fmt.Sprintf("u%04d", i), 0)
	}
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	m1 := mem()
	if err := e.svc.Stop(e.ctx, "fa"); err != nil {
		t.Fatal(err)
	}
	for range 3 { // the leader's ticks: a queue step journals the late entrants, then the archive
		live, err := e.db.LiveSales(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		e.svc.queues.Tick(e.ctx, live, fence)
		e.svc.resyncAll(e.ctx)
	}
	if s, err := e.db.Sale(e.ctx, "fa"); err != nil || !s.Archived {
		t.Fatalf("the sale is not archived: %v %v", s.Archived, err)
	}
	for _, k := range []string{lua.QueueKey("fa"), lua.QueueLateKey("fa"), lua.QueueWindowsKey("fa"), lua.QueueJournalKey("fa")} {
		if e.rdb.Exists(e.ctx, k).Val() != 0 {
			t.Errorf("%s still in Redis after the archive", k)
		}
	}
	m2 := mem()
	t.Logf("redis used_memory: %d before the drop, %d with %d entrants (%.0f bytes each), %d after the archive (%d given back)",
		m0, m1, n, float64(m1-m0)/n, m2, m1-m2)
	if m1-m2 < (m1-m0)/2 {
		t.Errorf("the archive gave back %d of the %d bytes the queue took", m1-m2, m1-m0)
	}
}

// TestQueueRestoreAfterFlushAll: Redis loses everything during the
// pre-queue and again after the start; each time the re-sync rebuilds the
// sale and the leader restores its queue from the journal: the same
// commitment (the seed revealed at the start hashes to the one published
// at the opening), every entrant back with the same entry and rank, the
// frontier not moved back. On SQLite and PostgreSQL.
func TestQueueRestoreAfterFlushAll(t *testing.T) {
	for _, c := range []struct {
		name string
		dsn  func(*testing.T) string
	}{{"sqlite", sqliteDSN}, {"postgres", postgresDSN}} {
		t.Run(c.name, func(t *testing.T) { testQueueRestoreAfterFlushAll(t, c.dsn(t)) })
	}
}

func testQueueRestoreAfterFlushAll(t *testing.T, dsn string) {
	e := newEnv(t, dsn, nil)
	const id = "fj"
	sale, fence := fairEnv(t, e, id, 3, 20, nil)
	step := func() {
		t.Helper()
		if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
			t.Fatalf("QueueStep: %v", err)
		}
	}
	flush := func() {
		t.Helper()
		if err := e.rdb.FlushAll(e.ctx).Err(); err != nil {
			t.Fatal(err)
		}
		for i := range 2 { // the rebuild, then the pass that reopens it
			if _, _, err := e.svc.Resync(e.ctx, id); err != nil {
				t.Fatalf("re-sync %d: %v", i, err)
			}
		}
		step() // restores the queue
	}
	queue := func() map[string]string { return e.rdb.HGetAll(e.ctx, lua.QueueKey(id)).Val() }
	fields := func() []any {
		return e.rdb.HMGet(e.ctx, lua.SaleKey(id), lua.FieldQueueSeedSHA, lua.FieldQueuePrequeued, lua.FieldQueueLate, lua.FieldQueueAdmitted, lua.FieldQueueThreshold).Val()
	}
	e.clock.Add(10 * time.Second)
	step() // journals the entrants
	sha := fields()[0]
	before := queue()
	flush()
	if got := fields(); got[0] != sha || got[1] != "20" {
		t.Fatalf("after a FLUSHALL in the pre-queue: got queue_seed_sha256, queue_prequeued %v, want %v, 20", got[:2], sha)
	}
	if got := queue(); !maps.Equal(got, before) {
		t.Errorf("after a FLUSHALL in the pre-queue: got entrants %v, want %v", got, before)
	}
	// The start: ranked, 3 admitted; then 5 late entrants.
	e.clock.Set(*sale.StartsAt)
	if err := e.svc.Start(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	step()
	for i := range 5 {
		if err := lua.QueueEnter.Run(e.ctx, e.rdb, lua.QueueEnterKeys(id, "none"), fmt.Sprintf("late%d", i), 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Add(time.Second)
	step()
	seed := e.rdb.HGet(e.ctx, lua.SaleKey(id), lua.FieldQueueSeed).Val()
	raw, _ := hex.DecodeString(seed)
	if sum := sha256.Sum256(raw); hex.EncodeToString(sum[:]) != sha {
		t.Fatalf("revealed seed %s does not hash to the commitment %v", seed, sha)
	}
	want, wantFields := queue(), fields()
	if wantFields[3] != "3" {
		t.Fatalf("before the second loss: got queue_admitted %v, want 3", wantFields[3])
	}
	flush()
	if got := queue(); !maps.Equal(got, want) {
		t.Errorf("after a FLUSHALL past the start: got entrants %v, want %v", got, want)
	}
	if got := fields(); !slices.Equal(got, wantFields) {
		t.Errorf("after a FLUSHALL past the start: got queue_seed_sha256, queue_prequeued, queue_late, queue_admitted, queue_threshold %v, want %v", got, wantFields)
	}
	if got := e.rdb.HGet(e.ctx, lua.SaleKey(id), lua.FieldQueueSeed).Val(); got != seed {
		t.Errorf("after a FLUSHALL past the start: got seed %s, want %s", got, seed)
	}
	if got := e.rdb.HGet(e.ctx, lua.SaleKey(id), lua.FieldQueue).Val(); got != flashgate.QueueFair {
		t.Errorf("after a FLUSHALL past the start: got queue %q, want fair", got)
	}
}

// TestQueueRestoreLaggingRedis: Redis comes back older than the journal
// (a promoted replica that missed the last entries and admissions): the
// leader puts the missing entrants back and the frontier where it was; it
// never moves back.
func TestQueueRestoreLaggingRedis(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	const id = "fl"
	sale, fence := fairEnv(t, e, id, 4, 10, func(s *flashgate.Sale) { s.AdmitPerMinute = 120 })
	e.clock.Set(*sale.StartsAt)
	if err := e.svc.Start(e.ctx, id); err != nil {
		t.Fatal(err)
	}
	step := func() {
		t.Helper()
		if err := e.svc.QueueStep(e.ctx, sale, fence); err != nil {
			t.Fatalf("QueueStep: %v", err)
		}
	}
	step() // ranks, admits 2
	if err := lua.QueueEnter.Run(e.ctx, e.rdb, lua.QueueEnterKeys(id, "none"), "late", 0).Err(); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	step() // admits 2 more, journals the late entrant
	want := e.rdb.HGetAll(e.ctx, lua.QueueKey(id)).Val()
	wantK := e.rdb.HGet(e.ctx, lua.SaleKey(id), lua.FieldQueueAdmitted).Val()
	if wantK != "4" {
		t.Fatalf("got queue_admitted %s, want 4", wantK)
	}
	// The older Redis: the late entrant and the last admission missing.
	pipe := e.rdb.TxPipeline()
	pipe.HDel(e.ctx, lua.QueueKey(id), "late")
	pipe.Del(e.ctx, lua.QueueLateKey(id))
	pipe.HSet(e.ctx, lua.SaleKey(id), lua.FieldQueueLate, 0, lua.FieldQueueAdmitted, 2)
	if _, err := pipe.Exec(e.ctx); err != nil {
		t.Fatal(err)
	}
	step()
	if got := e.rdb.HGetAll(e.ctx, lua.QueueKey(id)).Val(); !maps.Equal(got, want) {
		t.Errorf("after the restore: got entrants %v, want %v", got, want)
	}
	if got := e.rdb.HGet(e.ctx, lua.SaleKey(id), lua.FieldQueueAdmitted).Val(); got != wantK {
		t.Errorf("after the restore: got queue_admitted %s, want %s (never back)", got, wantK)
	}
}
