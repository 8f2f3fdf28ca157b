package buckets

import (
	"strconv"
	"testing"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestSettleClaims: SettleClaims settles spill claims older than its bound
// and leaves younger ones: a claim whose spill never reserved is cleared
// (and its order fenced in every other bucket, so that the stalled spill
// cannot reserve it later), one whose order is live in a spill bucket or
// in the database is finalised with that bucket, and nothing is settled
// while a bucket is missing from Redis.
func TestSettleClaims(t *testing.T) {
	e := newEnv(t)
	const sale = "spill"
	l := Layout(e.startBucketed(flashgate.Sale{ID: sale, Name: "Spill", Total: 6, Buckets: 3}))
	home := l.Tag(0)
	var users []string
	for i := 0; len(users) < 5; i++ {
		if u := "u" + strconv.Itoa(i); l.Home(u) == 0 {
			users = append(users, u)
		}
	}
	a, b, c, d, x := users[0], users[1], users[2], users[3], users[4]
	claim := func(user, order string) {
		t.Helper()
		v, err := lua.Claim.Run(e.ctx, e.rdb, lua.ClaimKeys(home), user, order, e.clock.Now().UnixMilli()).Slice()
		if err != nil || v[0] != int64(0) {
			t.Fatalf("claim %s: %v, %v", user, v, err)
		}
	}
	spillReserve := func(b int, user, order string) int64 {
		t.Helper()
		v, err := lua.Reserve.Run(e.ctx, e.rdb, lua.SpillReserveKeys(l.Tag(b)), order, user, 1, 0, sale, b, lua.SpillArg).Slice()
		if err != nil {
			t.Fatal(err)
		}
		return v[0].(int64)
	}
	entry := func(user string) string { return e.rdb.HGet(e.ctx, lua.BuyersKey(home), user).Val() }
	settle := func(wantF, wantC int) {
		t.Helper()
		f, c, err := e.k.SettleClaims(e.ctx, l)
		if err != nil || f != wantF || c != wantC {
			t.Fatalf("SettleClaims: got %d finalised, %d cleared, %v; want %d, %d", f, c, err, wantF, wantC)
		}
	}

	claim(a, "oa") // stalled before its reserve
	claim(b, "ob") // stalled after its reserve in bucket 1
	if code := spillReserve(1, b, "ob"); code != lua.ReserveOK {
		t.Fatalf("spill reserve of ob: code %d", code)
	}
	claim(d, "od") // its row reached the database; bucket 2 lost the entry
	if _, err := e.db.InsertOrders(e.ctx, []flashgate.Order{{ID: "od", SaleID: sale, UserID: d, Quantity: 1,
		PriceCents: 1, Status: flashgate.StatusPendingPayment, Bucket: 2, CreatedAt: e.clock.Now()}}); err != nil {
		t.Fatal(err)
	}
	settle(0, 0) // all younger than the bound
	e.clock.Add(6 * time.Second)
	claim(c, "oc") // young
	settle(2, 1)
	if v := entry(a); v != "" {
		t.Errorf("a's entry after settling: got %q, want none", v)
	}
	for bk := 1; bk < 3; bk++ {
		if code := spillReserve(bk, a, "oa"); code != lua.ReserveFenced {
			t.Errorf("late spill reserve of oa in bucket %d: got code %d, want fenced", bk, code)
		}
	}
	if v := entry(b); v != lua.SpillMarker("ob", 1) {
		t.Errorf("b's entry: got %q, want %q", v, lua.SpillMarker("ob", 1))
	}
	if v := entry(d); v != lua.SpillMarker("od", 2) {
		t.Errorf("d's entry: got %q, want %q", v, lua.SpillMarker("od", 2))
	}
	if v := entry(c); v != lua.ClaimMarker("oc") {
		t.Errorf("c's young claim: got %q, want it kept", v)
	}
	if got := e.rdb.ZRange(e.ctx, lua.ClaimsKey(home), 0, -1).Val(); len(got) != 1 || got[0] != c {
		t.Errorf("claims: got %v, want [%s]", got, c)
	}

	// A bucket Redis lost: nothing is settled until its rebuild.
	claim(x, "ox")
	e.clock.Add(6 * time.Second)
	if err := e.rdb.Del(e.ctx, lua.SaleKey(l.Tag(2))).Err(); err != nil {
		t.Fatal(err)
	}
	settle(0, 0)
	if v := entry(x); v != lua.ClaimMarker("ox") {
		t.Errorf("x's claim with a bucket missing: got %q, want it kept", v)
	}
}
