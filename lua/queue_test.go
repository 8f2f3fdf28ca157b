package lua_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestQueueScripts walks a fair queue through its scripts on both
// backends: entry before the queue opens, pre-start and late entries,
// idempotence, a solution used twice, ranks, fenced frontier moves and the
// reserve's admission check.
func TestQueueScripts(t *testing.T) {
	forEach(t, backends(t), "queue", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const sale = "fq"
		enter := func(user, challenge string, ttl int64) []any {
			t.Helper()
			v, err := lua.QueueEnter.Run(ctx, rdb, lua.QueueEnterKeys(sale, challenge), user, ttl).Slice()
			if err != nil {
				t.Fatalf("QueueEnter %s: %v", user, err)
			}
			return v
		}
		want := func(what string, got, want []any) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %v, want %v", what, got, want)
			}
		}
		if got := enter("alice", "c0", 0); got[0] != int64(lua.EnterNoSale) {
			t.Errorf("no sale: got %v", got)
		}
		if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(sale), 3, 4, 1, 100, "", "fair").Err(); err != nil {
			t.Fatal(err)
		}
		want("before the queue opens", enter("alice", "c0", 0), []any{int64(lua.EnterNotOpen), "", int64(0)})
		if n, err := lua.QueueOpen.Run(ctx, rdb, lua.SaleKeys(sale), "00", "11", 0, 60).Int(); err != nil || n != 1 {
			t.Fatalf("QueueOpen: %d %v", n, err)
		}
		want("alice enters", enter("alice", "c1", 60000), []any{int64(0), "p", int64(1), "11"})
		want("alice again", enter("alice", "c2", 60000), []any{int64(0), "p", int64(0), "11"})
		want("bob reuses c1", enter("bob", "c1", 60000), []any{int64(lua.EnterSolveUsed), "", int64(0)})
		want("bob enters", enter("bob", "c3", 60000), []any{int64(0), "p", int64(1), "11"})
		if v, err := lua.QueueStart.Run(ctx, rdb, lua.SaleKeys(sale), "00").Slice(); err != nil || !reflect.DeepEqual(v, []any{int64(2), "00"}) {
			t.Fatalf("QueueStart: %v %v", v, err)
		}
		want("carol enters late", enter("carol", "c4", 60000), []any{int64(0), "l1", int64(1), "11"})
		want("dave enters late", enter("dave", "", 0), []any{int64(0), "l2", int64(1), "11"})

		// The frontier moves only once ranked, only with the newest fencing
		// token, from the frontiers Redis has, and no further than the
		// units nobody was promised.
		adv := func(fence, k, e, now, most int64, users []string, thetas ...string) []int64 {
			t.Helper()
			args := []any{fence, k, e, now, most, 0, len(users)}
			for _, u := range users {
				args = append(args, u)
			}
			for _, th := range thetas {
				args = append(args, th)
			}
			v, err := lua.QueueAdvance.Run(ctx, rdb, lua.QueueAdvanceKeys(sale), args...).Int64Slice()
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
		wantAdv := func(what string, got, want []int64) {
			t.Helper()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s: got %v, want %v", what, got, want)
			}
		}
		wantAdv("advance before ranking", adv(5, 0, 0, 1000, 1, nil, "t1"), []int64{-3, 0, 0})
		if n, err := lua.QueueRank.Run(ctx, rdb, lua.QueueRankKeys(sale), 5, "1", "-", "-", "bob", "r1", "alice", "r2").Int(); err != nil || n != 2 {
			t.Fatalf("QueueRank: %d %v, want 2", n, err)
		}
		wantAdv("a stale fencing token", adv(4, 0, 0, 1000, 1, nil, "t1"), []int64{-1, 0, 0})
		wantAdv("from a queue_admitted that is not Redis's", adv(5, 1, 0, 1000, 1, []string{"bob"}), []int64{0, 0, 0})
		wantAdv("users that do not cover (queue_expired, queue_admitted]", adv(5, 0, 0, 1000, 1, []string{"bob"}), []int64{-4, 0, 0})
		reserve := func(user string) int64 {
			t.Helper()
			v, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(sale), "o-"+user, user, 1, 1, sale).Slice()
			if err != nil {
				t.Fatal(err)
			}
			return v[0].(int64)
		}
		if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(sale), "open").Err(); err != nil {
			t.Fatal(err)
		}
		if got := reserve("bob"); got != lua.ReserveNotAdmitted {
			t.Errorf("bob before admission: got %d, want %d", got, lua.ReserveNotAdmitted)
		}
		wantAdv("admit 1", adv(5, 0, 0, 1000, 1, nil, "t1"), []int64{1, 1, 0})
		if got := reserve("alice"); got != lua.ReserveNotAdmitted {
			t.Errorf("alice (position 2) with 1 admitted: got %d, want not admitted", got)
		}
		if got := reserve("mallory"); got != lua.ReserveNotAdmitted {
			t.Errorf("mallory never entered: got %d, want not admitted", got)
		}
		if got := reserve("bob"); got != lua.ReserveOK {
			t.Errorf("bob (position 1) admitted: got %d, want OK", got)
		}
		// 2 units left, bob holds his: alice and carol (2 + 1).
		wantAdv("admit up to 3", adv(6, 1, 0, 2000, 5, []string{"bob"}, "t2"), []int64{1, 3, 0})
		// Both are promised a unit: nothing is free.
		wantAdv("every unit promised", adv(6, 3, 0, 3000, 5, []string{"bob", "alice", "carol"}), []int64{1, 3, 0})
		if got := hget(t, ctx, rdb, lua.SaleKey(sale), lua.FieldQueuePromised); got != "2" {
			t.Errorf("queue_promised with alice and carol admitted and unserved: got %q, want 2", got)
		}
		// Bob's window (from 1000, 60 s) ends; alice's and carol's not yet.
		wantAdv("bob's window ends", adv(6, 3, 0, 61000, 5, []string{"bob", "alice", "carol"}), []int64{1, 3, 1})
		// Theirs end: 2 units free, dave (position 4) is the last.
		wantAdv("the others' windows end", adv(6, 3, 1, 62000, 5, []string{"alice", "carol"}), []int64{1, 4, 3})
		if v, err := rdb.HMGet(ctx, lua.SaleKey(sale), lua.FieldQueueThreshold, lua.FieldQueueExpiredThreshold, lua.FieldQueueRate).Result(); err != nil ||
			!reflect.DeepEqual(v, []any{"t2", "t2", "1"}) {
			t.Errorf("queue_threshold, queue_expired_threshold, queue_rate: got %v %v, want [t2 t2 1]", v, err)
		}
		// ReserveMany answers as Reserve would for each.
		v, err := lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(sale), 1, sale, "",
			"o-a", "alice", 1, "", "o-c", "carol", 1, "", "o-d", "dave", 1, "").Slice()
		if err != nil {
			t.Fatal(err)
		}
		want("ReserveMany", v, []any{int64(9), "", int64(9), "", int64(0), "o-d"})
	})
}
