package controlplane

import (
	"errors"
	"strconv"
	"testing"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// TestBucketedOrderLookup: an order of a bucketed sale that is reserved in
// Redis and not yet stored is found through the buyer's home bucket, as
// the order itself, as the final marker of an order spilled to another
// bucket, or as the claim of a spill in flight whose reserve is done, and
// is answered reserved; pay and cancel then answer not_payable (the order
// exists but is not yet stored), not not_found. A claim whose spill has
// not reserved yet, another user's order and an unknown id are not found.
// On a single redis-server and on a Redis Cluster (the buckets on several
// primaries).
func TestBucketedOrderLookup(t *testing.T) {
	for _, backend := range redisBackends {
		t.Run(backend, func(t *testing.T) {
			e := newEnvOn(t, backend, sqliteDSN(t), nil)
			const sale = "bkt"
			l := e.startBucketed(flashgate.Sale{ID: sale, Name: "Bucketed", PriceCents: 700, Total: 12, Buckets: 3})
			// A plain sale alongside, so that the lookup has to tell them apart.
			e.openSale("plain", 5, 1)

			// Users by home bucket.
			byHome := map[int][]string{}
			for i := 0; len(byHome[0]) < 4 || len(byHome[1]) < 2 || len(byHome[2]) < 2; i++ {
				u := "user-" + strconv.Itoa(i)
				h := l.Home(u)
				byHome[h] = append(byHome[h], u)
			}
			reserve := func(b int, user, order string, spill bool) {
				t.Helper()
				args := []any{order, user, 1, e.clock.Now().UnixMilli(), sale, b}
				keys := lua.ReserveKeys(l.Tag(b))
				if spill {
					args, keys = append(args, lua.SpillArg), lua.SpillReserveKeys(l.Tag(b))
				}
				v, err := lua.Reserve.Run(e.ctx, e.rdb, keys, args...).Slice()
				if err != nil || v[0].(int64) != lua.ReserveOK {
					t.Fatalf("reserve %s in bucket %d: %v, %v", order, b, v, err)
				}
			}
			claim := func(user, order string) {
				t.Helper()
				v, err := lua.Claim.Run(e.ctx, e.rdb, lua.ClaimKeys(l.Tag(0)), user, order, e.clock.Now().UnixMilli()).Slice()
				if err != nil || v[0] != int64(0) {
					t.Fatalf("claim %s: %v, %v", order, v, err)
				}
			}
			// In every home bucket: the order itself.
			reserve(0, byHome[0][0], "home0", false)
			reserve(1, byHome[1][0], "home1", false)
			reserve(2, byHome[2][0], "home2", false)
			// Spilled from bucket 0 to bucket 2 and finalised: the home
			// holds the final marker.
			claim(byHome[0][1], "spilled")
			reserve(2, byHome[0][1], "spilled", true)
			if err := lua.Finalize.Run(e.ctx, e.rdb, lua.MarkerKeys(l.Tag(0)), byHome[0][1], "spilled", 2).Err(); err != nil {
				t.Fatal(err)
			}
			// A spill in flight: claimed and reserved in bucket 1, not
			// finalised yet.
			claim(byHome[0][2], "inflight")
			reserve(1, byHome[0][2], "inflight", true)
			// A spill that has only claimed.
			claim(byHome[0][3], "claimonly")
			// An order of the plain sale.
			if code, _ := e.reserve("plain", "plain-user"); code != lua.ReserveOK {
				t.Fatalf("reserve on plain: code %d", code)
			}
			plainOrder := e.rdb.HGet(e.ctx, lua.BuyersKey("plain"), "plain-user").Val()

			for _, c := range []struct {
				name, order, user, sale string // sale "" = not found
			}{
				{"home bucket 0", "home0", byHome[0][0], sale},
				{"home bucket 1", "home1", byHome[1][0], sale},
				{"home bucket 2", "home2", byHome[2][0], sale},
				{"spilled, final marker", "spilled", byHome[0][1], sale},
				{"spill in flight, reserved", "inflight", byHome[0][2], sale},
				{"claim only", "claimonly", byHome[0][3], ""},
				{"another user's order", "home1", byHome[0][0], ""},
				{"unknown order", "nosuchorder", byHome[0][0], ""},
				{"plain sale", plainOrder, "plain-user", "plain"},
			} {
				o, err := e.svc.Order(e.ctx, c.order, c.user)
				if c.sale == "" {
					if !errors.Is(err, flashgate.ErrNotFound) {
						t.Errorf("%s: Order: got %+v, %v; want not found", c.name, o, err)
					}
					continue
				}
				if err != nil || o.Status != flashgate.StatusReserved || o.SaleID != c.sale || o.ID != c.order || o.UserID != c.user {
					t.Errorf("%s: Order: got %+v, %v; want reserved in %s", c.name, o, err, c.sale)
				}
				if c.sale == "plain" {
					continue
				}
				// Not yet stored (PersistWait is off in these tests):
				// not payable, and the order stays.
				if _, err := e.svc.Pay(e.ctx, c.order, c.user); !errors.Is(err, flashgate.ErrNotPayable) {
					t.Errorf("%s: Pay: got %v, want not_payable", c.name, err)
				}
				if _, err := e.svc.Cancel(e.ctx, c.order, c.user); !errors.Is(err, flashgate.ErrNotPayable) {
					t.Errorf("%s: Cancel: got %v, want not_payable", c.name, err)
				}
			}
			if _, err := e.svc.Pay(e.ctx, "claimonly", byHome[0][3]); !errors.Is(err, flashgate.ErrNotFound) {
				t.Errorf("claim only: Pay: got %v, want not_found", err)
			}

			// Once stored, the row answers.
			for b := range l.N() {
				e.persist(l.Tag(b))
			}
			for _, c := range []struct{ order, user string }{
				{"home0", byHome[0][0]}, {"spilled", byHome[0][1]}, {"inflight", byHome[0][2]},
			} {
				if o, err := e.svc.Pay(e.ctx, c.order, c.user); err != nil || o.Status != flashgate.StatusPaid {
					t.Errorf("Pay(%s) once stored: got %+v, %v; want paid", c.order, o, err)
				}
			}
		})
	}
}

// TestLookupDuringRebuild: an order in neither the database nor Redis is
// not_found, except while a live sale is lost from Redis or paused for its
// rebuild: an order sink may then still hold an order read before the loss,
// so pay, cancel and reading the order answer unavailable (a retry finds
// it) instead of a not_found that turns out false.
func TestLookupDuringRebuild(t *testing.T) {
	e := newEnv(t, sqliteDSN(t), nil)
	e.openSale("s", 5, 1)
	const order = "01M8YVGGDQBTMXZ73T7116ZMER"
	check := func(state string, want error) {
		t.Helper()
		for name, call := range map[string]func() error{
			"Order":  func() error { _, err := e.svc.Order(e.ctx, order, "u"); return err },
			"Pay":    func() error { _, err := e.svc.Pay(e.ctx, order, "u"); return err },
			"Cancel": func() error { _, err := e.svc.Cancel(e.ctx, order, "u"); return err },
		} {
			if err := call(); !errors.Is(err, want) {
				t.Errorf("%s of an unknown order, sale %s: got %v, want %v", name, state, err, want)
			}
		}
	}
	check("open", flashgate.ErrNotFound)
	h := e.rdb.HGetAll(e.ctx, lua.SaleKey("s")).Val()
	if err := e.rdb.Del(e.ctx, lua.SaleKey("s")).Err(); err != nil {
		t.Fatal(err)
	}
	check("lost from Redis", flashgate.ErrUnavailable)
	h[lua.FieldStart], h[lua.FieldResume] = "0", "1"
	if err := e.rdb.HSet(e.ctx, lua.SaleKey("s"), h).Err(); err != nil {
		t.Fatal(err)
	}
	check("paused for its rebuild", flashgate.ErrUnavailable)
	if err := e.rdb.HSet(e.ctx, lua.SaleKey("s"), lua.FieldStart, "1").Err(); err != nil {
		t.Fatal(err)
	}
	check("reopened", flashgate.ErrNotFound)
}
