package lua_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestScriptsTouchOneSale: every script's KEYS (from its header) belong to
// one hash tag, so that each runs on Redis Cluster without CROSSSLOT.
func TestScriptsTouchOneSale(t *testing.T) {
	files, err := filepath.Glob("*.lua")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	keyLine := regexp.MustCompile(`^-- KEYS\[\d+\]\s+\S.*?\s(\S+)\s*$`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, line := range strings.Split(string(b), "\n") {
			if m := keyLine.FindStringSubmatch(line); m != nil {
				keys = append(keys, m[1])
			}
		}
		if len(keys) == 0 {
			t.Errorf("%s: no KEYS in its header", f)
			continue
		}
		tag := func(k string) string {
			i, j := strings.Index(k, "{"), strings.Index(k, "}")
			if i < 0 || j < i {
				return k
			}
			return k[i : j+1]
		}
		for _, k := range keys[1:] {
			if tag(k) != tag(keys[0]) {
				t.Errorf("%s: keys %v span slots", f, keys)
				break
			}
		}
	}
}

// releaseBatch runs ReleaseBatch with base and triples order, user,
// quantity of a sale of one stock (each variant "").
func releaseBatch(ctx context.Context, rdb *redis.Client, base string, triples ...string) ([]int64, error) {
	args := []any{base}
	for i, s := range triples {
		args = append(args, s)
		if i%3 == 2 {
			args = append(args, "")
		}
	}
	return lua.ReleaseBatch.Run(ctx, rdb,
		lua.ReleaseKeys(saleID), args...).Int64Slice()
}

// TestReleaseBatch: many releases in one call, each once; a re-sync's batch
// keeps the delivered count and is refused when Redis is behind it.
func TestReleaseBatch(t *testing.T) {
	forEach(t, backends(t), "batch", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		prepare(t, ctx, rdb, sale{total: 10, perUser: 3, state: "open"})
		for _, c := range []call{{"o1", "u1", "1"}, {"o2", "u2", "3"}, {"o3", "u3", "2"}} {
			if res, err := reserve(ctx, rdb, c.order, c.user, c.qty); err != nil || res[0] != int64(0) {
				t.Fatalf("reserve %v: %v, %v", c, res, err)
			}
		}
		if n, err := release(ctx, rdb, "o1", "u1", "1"); err != nil || n != 1 {
			t.Fatalf("single release: %d, %v", n, err)
		}
		got, err := releaseBatch(ctx, rdb, "", "o1", "u1", "1", "o2", "u2", "3", "o2", "u2", "3")
		if want := []int64{0, 1, 3}; err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("ReleaseBatch: got %v, %v; want %v", got, err, want)
		}
		if b := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); b != "2" {
			t.Errorf("booked: got %s, want 2", b)
		}
		if u := hget(t, ctx, rdb, lua.BuyersKey(saleID), "u2"); u != "" {
			t.Errorf("buyer u2 still %q", u)
		}
		if hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldDelivered) != "" {
			t.Errorf("a plain batch wrote delivered")
		}
		// A re-sync delivers 2 after 5 delivered before: delivered = 7.
		got, err = releaseBatch(ctx, rdb, "5", "o3", "u3", "2", "o9", "u9", "1")
		if want := []int64{-2, 0, 0}; err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("ReleaseBatch behind: got %v, %v; want %v", got, err, want)
		}
		rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldDelivered, 5)
		got, err = releaseBatch(ctx, rdb, "5", "o3", "u3", "2", "o9", "u9", "1")
		if want := []int64{0, 2, 2}; err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("ReleaseBatch delivering: got %v, %v; want %v", got, err, want)
		}
		if d := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldDelivered); d != "7" {
			t.Errorf("delivered: got %q, want 7", d)
		}
		if b := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); b != "0" {
			t.Errorf("booked never below 0: got %s", b)
		}
		// A bad quantity anywhere fails the call before any write.
		if _, err := releaseBatch(ctx, rdb, "", "o4", "u4", "1", "o5", "u5", "0"); err == nil {
			t.Errorf("bad quantity: got nil error")
		}
		if ok, _ := rdb.SIsMember(ctx, lua.ReleasedKey(saleID), "o4").Result(); ok {
			t.Errorf("a failed batch released o4")
		}
		rdb.Del(ctx, lua.SaleKey(saleID))
		rdb.HSet(ctx, lua.SaleKey(saleID), lua.FieldAccess, 1)
		got, err = releaseBatch(ctx, rdb, "", "o4", "u4", "1")
		if want := []int64{-1, 0, 0}; err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("no sale: got %v, %v; want %v", got, err, want)
		}
	})
}

// TestTally: the gateways' counters add to an existing sale and never
// create a hash.
func TestTally(t *testing.T) {
	forEach(t, backends(t), "tally", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := lua.SaleKeys(saleID)
		if n, err := lua.Tally.Run(ctx, rdb, keys, 3, 4).Int64(); err != nil || n != 0 {
			t.Fatalf("Tally without a sale: got %d, %v; want 0", n, err)
		}
		if n, _ := rdb.Exists(ctx, lua.SaleKey(saleID)).Result(); n != 0 {
			t.Fatalf("Tally created the sale hash")
		}
		prepare(t, ctx, rdb, sale{total: 5})
		for i := 0; i < 2; i++ {
			if n, err := lua.Tally.Run(ctx, rdb, keys, 3, 4).Int64(); err != nil || n != 1 {
				t.Fatalf("Tally: got %d, %v; want 1", n, err)
			}
		}
		if a, r := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldAccess), hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldRejected); a != "6" || r != "8" {
			t.Errorf("access %s rejected %s, want 6 and 8", a, r)
		}
	})
}

// TestRestore: released rows join the released set and drop their buyer;
// live rows get their buyer back unless released.
func TestRestore(t *testing.T) {
	forEach(t, backends(t), "restore", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		rdb.HSet(ctx, lua.BuyersKey(saleID), "u1", "o1", "u2", "o2-old")
		if v, err := lua.RestoreBegin.Run(ctx, rdb, lua.SaleKeys(saleID), 0, "r1").Slice(); err != nil || fmt.Sprint(v) != "[1 r1]" {
			t.Fatalf("RestoreBegin: got %v, %v; want [1 r1]", v, err)
		}
		keys := lua.RestoreKeys(saleID)
		n, err := lua.Restore.Run(ctx, rdb, keys, 0, "r1", 2, "u1", "o1", "u2", "o2", "u3", "o3", "u4", "o1", "u2", "o2-new").Int64()
		if err != nil || n != 5 {
			t.Fatalf("Restore: got %d, %v; want 5", n, err)
		}
		got, _ := rdb.HGetAll(ctx, lua.BuyersKey(saleID)).Result()
		if want := map[string]string{"u2": "o2-old", "u3": "o3"}; !reflect.DeepEqual(got, want) {
			t.Errorf("buyers: got %v, want %v", got, want)
		}
		if got, want := rdb.HGetAll(ctx, lua.SaleKey(saleID)).Val(), map[string]string{lua.FieldRestoring: "r1"}; !reflect.DeepEqual(got, want) {
			t.Errorf("the sale hash after Restore: got %v, want %v (its restore's id alone)", got, want)
		}
	})
}

// TestRestoreRefusedOnceLost: RestoreBegin writes its id only into a hash
// that holds none (a second rebuild at once joins the first's); a page of
// Restore, and Restored, whose id the hash no longer holds (Redis lost the
// sale since the restore began, or another restore began after a loss)
// are refused and change nothing.
func TestRestoreRefusedOnceLost(t *testing.T) {
	forEach(t, backends(t), "restore", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		keys := lua.RestoreKeys(saleID)
		begin := func(id string) string {
			t.Helper()
			v, err := lua.RestoreBegin.Run(ctx, rdb, lua.SaleKeys(saleID), 0, id).Slice()
			if err != nil || len(v) != 2 {
				t.Fatalf("RestoreBegin %s: got %v, %v", id, v, err)
			}
			return fmt.Sprint(v[1])
		}
		page := func(id string) int64 {
			t.Helper()
			n, err := lua.Restore.Run(ctx, rdb, keys, 0, id, 0, "u1", "o1").Int64()
			if err != nil {
				t.Fatalf("Restore %s: %v", id, err)
			}
			return n
		}
		restored := func(id string) int64 {
			t.Helper()
			n, err := lua.Restored.Run(ctx, rdb, lua.SaleKeys(saleID), 0, "d-"+id, id).Int64()
			if err != nil {
				t.Fatalf("Restored %s: %v", id, err)
			}
			return n
		}
		if got := page("r1"); got != lua.RestoreLost {
			t.Errorf("a page before any restore began: got %d, want %d", got, lua.RestoreLost)
		}
		if got := begin("r1"); got != "r1" {
			t.Fatalf("the first restore's id: got %s, want r1", got)
		}
		if got := begin("r2"); got != "r1" {
			t.Errorf("a second restore at once: got id %s, want r1 (it joins the first)", got)
		}
		if got := page("r1"); got != 1 {
			t.Errorf("a page of the restore: got %d, want 1", got)
		}
		// Redis loses the sale; a new rebuild begins before the old one's
		// next page.
		if err := rdb.FlushAll(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		if got := restored("r1"); got != lua.RestoredLost {
			t.Errorf("Restored after the loss: got %d, want %d", got, lua.RestoredLost)
		}
		if n := rdb.Exists(ctx, lua.SaleKey(saleID)).Val(); n != 0 {
			t.Errorf("a refused Restored wrote the hash")
		}
		if got := begin("r3"); got != "r3" {
			t.Fatalf("the restore after the loss: got id %s, want r3", got)
		}
		for _, tc := range []struct {
			what string
			got  int64
		}{{"page", page("r1")}, {"Restored", restored("r1")}} {
			if tc.got != lua.RestoreLost {
				t.Errorf("the old restore's %s after the new one began: got %d, want %d", tc.what, tc.got, lua.RestoreLost)
			}
		}
		if n := rdb.HLen(ctx, lua.BuyersKey(saleID)).Val(); n != 0 {
			t.Errorf("buyers after the refused pages: got %d, want 0", n)
		}
		if rdb.HExists(ctx, lua.SaleKey(saleID), "restored").Val() {
			t.Errorf("a refused Restored wrote its id")
		}
		if got := restored("r3"); got != 1 {
			t.Errorf("the new restore's Restored: got %d, want 1", got)
		}
	})
}
