package lua_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// TestReleasesCounter: Release and ReleaseBatch raise the sale hash's
// releases field by the orders they release now, never for an order
// released before.
func TestReleasesCounter(t *testing.T) {
	forEach(t, backends(t), "counter", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		const id = "rc"
		if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id), 10, 15, 1, 100).Err(); err != nil {
			t.Fatalf("Prepare: %v", err)
		}
		rdb.HSet(ctx, lua.SaleKey(id), lua.FieldBooked, 5, lua.FieldReserved, 5)
		steps := []struct {
			name string
			run  func() error
			want int64
		}{
			{"release", func() error { return lua.Release.Run(ctx, rdb, lua.ReleaseKeys(id), "o1", "u1", 1, "").Err() }, 1},
			{"release again", func() error { return lua.Release.Run(ctx, rdb, lua.ReleaseKeys(id), "o1", "u1", 1, "").Err() }, 1},
			{"batch of a new and a released order", func() error {
				return lua.ReleaseBatch.Run(ctx, rdb, lua.ReleaseKeys(id), "", "o1", "u1", 1, "", "o2", "u2", 2, "").Err()
			}, 2},
			{"batch of two new orders", func() error {
				return lua.ReleaseBatch.Run(ctx, rdb, lua.ReleaseKeys(id), "0:1", "o3", "u3", 1, "", "o4", "u4", 1, "").Err()
			}, 4},
		}
		for _, s := range steps {
			if err := s.run(); err != nil {
				t.Fatalf("%s: %v", s.name, err)
			}
			got, err := rdb.HGet(ctx, lua.SaleKey(id), lua.FieldReleases).Int64()
			if err != nil || got != s.want {
				t.Fatalf("%s: releases %d, %v; want %d", s.name, got, err, s.want)
			}
		}
	})
}

// TestResyncComparesReleases: Resync sets booked from the snapshot when
// the hash's releases counter is what the caller read before it (ARGV[13]),
// or was not read, or the call ends a restore; when the counter moved, a
// release reached the hash meanwhile and booked is the lesser of the
// snapshot's figure and the hash's own (per variant, the sale's their sum).
func TestResyncComparesReleases(t *testing.T) {
	cases := []struct {
		name     string
		read     string // ARGV[13]
		restored string // ARGV[9]
		L        int64
		variants bool
		want     int64 // booked after (with variants: S's; M stays 2)
	}{
		// The hash: booked 3 (variants: S 1, M 2), reserved 5, releases 7;
		// P = 5, so booked := L.
		{name: "counter unchanged: the snapshot raises booked", read: "7", restored: "0", L: 4, want: 4},
		{name: "counter moved: the hash's lower booked stays", read: "6", restored: "0", L: 4, want: 3},
		{name: "counter moved: the snapshot's lower booked", read: "6", restored: "0", L: 2, want: 2},
		{name: "counter not read", read: "", restored: "0", L: 4, want: 4},
		{name: "a restore's last call", read: "6", restored: "1", L: 4, want: 4},
		{name: "variants, counter moved", read: "6", restored: "0", L: 4, variants: true, want: 1},
		{name: "variants, counter unchanged", read: "7", restored: "0", L: 4, variants: true, want: 2},
	}
	forEach(t, backends(t), "compare", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				id := "rcmp-" + c.name
				key := lua.SaleKey(id)
				spec, arg := "", ""
				if c.variants {
					spec = "S:5,M:5"
					// S: L 2 of P 3; M: L 2 of P 2 (the sale's L is 4).
					arg = "S:5:2:3,M:5:2:2"
				}
				if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(id), 10, 15, 1, 100, "", "", spec).Err(); err != nil {
					t.Fatalf("Prepare: %v", err)
				}
				rdb.HSet(ctx, key, lua.FieldBooked, 3, lua.FieldReserved, 5, lua.FieldReleases, 7)
				if c.variants {
					rdb.HSet(ctx, key, lua.VariantField("S", lua.FieldBooked), 1, lua.VariantField("S", lua.FieldReserved), 3,
						lua.VariantField("M", lua.FieldBooked), 2, lua.VariantField("M", lua.FieldReserved), 2)
				}
				res, err := lua.Resync.Run(ctx, rdb, lua.SaleKeys(id), c.L, 5, 10, 1, 100,
					"open", "1.5", 0, c.restored, 1, "", arg, c.read).Int64Slice()
				if err != nil || len(res) != 10 {
					t.Fatalf("Resync: got %v, %v", res, err)
				}
				if !c.variants {
					if res[5] != c.want {
						t.Errorf("booked: got %d, want %d", res[5], c.want)
					}
					return
				}
				s := lua.Int(rdb.HGet(ctx, key, lua.VariantField("S", lua.FieldBooked)).Val())
				m := lua.Int(rdb.HGet(ctx, key, lua.VariantField("M", lua.FieldBooked)).Val())
				if s != c.want || m != 2 || res[5] != s+m {
					t.Errorf("booked: S %d M %d sale %d, want S %d M 2 and their sum", s, m, res[5], c.want)
				}
			})
		}
	})
}
