package lua_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// replID returns the master_replid of the primary rdb talks to, or "" when
// it cannot tell (miniredis).
func replID(ctx context.Context, rdb *redis.Client) string {
	info, err := rdb.Info(ctx, "replication").Result()
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "master_replid:"); ok {
			return v
		}
	}
	return ""
}

// TestReserveFence covers the failover fence of Reserve, ReserveMany and a
// spill reserve: a marker naming another primary (what a promoted replica
// carries) stops every reserve that would take units and pauses the sale as
// lua.Pause does, and nothing else changes;
// no marker, this primary's marker, or a store that cannot tell its
// replication id (miniredis) lets them through; answers that take nothing
// are given as before.
func TestReserveFence(t *testing.T) {
	bs := backends(t)
	const other = "0123456789abcdef0123456789abcdef01234567"
	for _, tc := range fenceCases(other) {
		for _, many := range []bool{false, true} {
			mode := "Reserve"
			if many {
				mode = "ReserveMany"
			}
			forEach(t, bs, tc.name+"/"+mode, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
				mini := replID(ctx, rdb) == ""
				prepare(t, ctx, rdb, sale{total: 3, perUser: 2, price: 500, state: "open"})
				for _, c := range tc.before {
					if res, err := reserve(ctx, rdb, c.order, c.user, c.qty); err != nil || res[0] != int64(lua.ReserveOK) {
						t.Fatalf("setup reserve %v: got %v, %v", c, res, err)
					}
				}
				marker := tc.marker
				if marker == "self" {
					marker = replID(ctx, rdb)
				}
				if marker != "" {
					if err := rdb.Set(ctx, lua.PrimaryKey(saleID), marker, 0).Err(); err != nil {
						t.Fatal(err)
					}
				}
				booked := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked)
				entries := rdb.XLen(ctx, lua.OrdersKey(saleID)).Val()
				var got []any
				if many {
					args := []any{1700000000123, saleID, ""}
					for _, c := range tc.calls {
						args = append(args, c.order, c.user, c.qty, "")
					}
					res, err := lua.ReserveMany.Run(ctx, rdb, lua.ReserveKeys(saleID), args...).Slice()
					if err != nil {
						t.Fatalf("ReserveMany: %v", err)
					}
					got = res
				} else {
					for _, c := range tc.calls {
						res, err := reserve(ctx, rdb, c.order, c.user, c.qty)
						if err != nil {
							t.Fatalf("Reserve: %v", err)
						}
						got = append(got, res...)
					}
				}
				want := tc.want
				if mini && tc.wantMini != nil {
					want = tc.wantMini
				}
				if !reflect.DeepEqual(got, want) {
					t.Errorf("answers: got %v, want %v", got, want)
				}
				if tc.fenced && !mini {
					if b := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldBooked); b != booked {
						t.Errorf("booked while fenced: got %s, want %s", b, booked)
					}
					if n := rdb.XLen(ctx, lua.OrdersKey(saleID)).Val(); n != entries {
						t.Errorf("stream entries while fenced: got %d, want %d", n, entries)
					}
					start := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldStart)
					resume := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldResume)
					if start != "0" || resume != "2" {
						t.Errorf("start, resume once fenced: got %q, %q; want \"0\", \"2\" (paused as lua.Pause pauses)", start, resume)
					}
				}
			})
		}
	}
}

// fenceCase is one case of TestReserveFence.
type fenceCase struct {
	name   string
	marker string // "" none, "self" this primary's id, else the marker
	before []call // reserved before the marker is set
	calls  []call // one ReserveMany call, or as many Reserve calls
	// want is the answers, {code, order} per call, on redis-server;
	// wantMini, when set, on miniredis (which cannot tell its replication
	// id, so the fence never trips).
	want, wantMini []any
	fenced         bool // only start and resume may change (paused)
}

func fenceCases(other string) []fenceCase {
	ok := int64(lua.ReserveOK)
	paused := int64(lua.ReservePaused)
	return []fenceCase{
		{name: "no marker", calls: []call{{"o1", "u1", "1"}}, want: []any{ok, "o1"}},
		{name: "this primary", marker: "self", calls: []call{{"o1", "u1", "1"}, {"o2", "u2", "2"}},
			want: []any{ok, "o1", ok, "o2"}},
		{name: "another primary", marker: other, calls: []call{{"o1", "u1", "1"}, {"o2", "u2", "2"}},
			want: []any{paused, "", paused, ""}, wantMini: []any{ok, "o1", ok, "o2"}, fenced: true},
		// Answers that take nothing are given as before: already purchased,
		// a bad quantity, sold out; the one that would take a unit is
		// fenced.
		{name: "another primary, answers that take nothing", marker: other, before: []call{{"o0", "u0", "2"}},
			calls:    []call{{"o1", "u0", "1"}, {"o2", "u2", "9"}, {"o3", "u3", "2"}, {"o4", "u4", "1"}},
			want:     []any{int64(lua.ReservePurchased), "o0", int64(lua.ReserveBadQuantity), "", int64(lua.ReserveSoldOut), "", paused, ""},
			wantMini: []any{int64(lua.ReservePurchased), "o0", int64(lua.ReserveBadQuantity), "", int64(lua.ReserveSoldOut), "", ok, "o4"},
			fenced:   true},
	}
}

// TestSpillReserveFence: a spill reserve in a bucket whose marker names
// another primary is fenced like any other, and sells again once the
// marker names this primary and the bucket is reopened.
func TestSpillReserveFence(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prepare(t, ctx, rdb, sale{total: 3, perUser: 1, price: 500, state: "open"})
	if err := rdb.Set(ctx, lua.PrimaryKey(saleID), "0123456789abcdef0123456789abcdef01234567", 0).Err(); err != nil {
		t.Fatal(err)
	}
	res, err := lua.Reserve.Run(ctx, rdb, lua.SpillReserveKeys(saleID), "o1", "u1", 1, 1700000000123, saleID, 0, lua.SpillArg).Slice()
	if want := []any{int64(lua.ReservePaused), ""}; err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("spill reserve while fenced: got %v, %v; want %v", res, err, want)
	}
	if start := hget(t, ctx, rdb, lua.SaleKey(saleID), lua.FieldStart); start != "0" {
		t.Errorf("start once fenced: got %q, want \"0\" (paused)", start)
	}
	// The control plane's rebuild sets the marker to this primary's id and
	// reopens the sale.
	if err := rdb.Set(ctx, lua.PrimaryKey(saleID), replID(ctx, rdb), 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(saleID), "open").Err(); err != nil {
		t.Fatal(err)
	}
	res, err = lua.Reserve.Run(ctx, rdb, lua.SpillReserveKeys(saleID), "o1", "u1", 1, 1700000000123, saleID, 0, lua.SpillArg).Slice()
	if want := []any{int64(lua.ReserveOK), "o1"}; err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("spill reserve once the marker names this primary: got %v, %v; want %v", res, err, want)
	}
}
