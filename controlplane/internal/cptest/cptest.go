// Package cptest holds what the tests of the control plane's packages
// share: a Releaser running the release scripts on the primary, and the
// inventory's reserve and the order sink's persist done by hand against a
// real Redis and a real database.
package cptest

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// Releaser is the tiny Releaser of the tests: lua.Release and
// lua.ReleaseBatch on the primary, with an injectable failure.
type Releaser struct {
	RDB redis.UniversalClient
	// Fail makes every call fail while set.
	Fail atomic.Bool
	// N counts the orders released.
	N atomic.Int64
}

// Release gives o's units back (lua.Release).
func (r *Releaser) Release(ctx context.Context, o flashgate.Order) (bool, error) {
	if r.Fail.Load() {
		return false, errors.New("injected release failure")
	}
	code, err := lua.Release.Run(ctx, r.RDB, lua.ReleaseKeys(o.SaleID), o.ID, o.UserID, o.Quantity, o.Variant).Int64()
	if err != nil {
		return false, err
	}
	if code == lua.ReleaseDone {
		r.N.Add(1)
	}
	return code == lua.ReleaseDone, nil
}

// ReleaseBatch gives the units of orders of one sale back, 500 orders a
// call (lua.ReleaseBatch).
func (r *Releaser) ReleaseBatch(ctx context.Context, orders []flashgate.Order) (int, error) {
	if r.Fail.Load() {
		return 0, errors.New("injected release failure")
	}
	n := 0
	for start := 0; start < len(orders); start += 500 {
		chunk := orders[start:min(start+500, len(orders))]
		sale := chunk[0].SaleID
		args := []any{""}
		for _, o := range chunk {
			if o.SaleID != sale {
				return n, errors.New("cptest.Releaser: one sale per chunk")
			}
			args = append(args, o.ID, o.UserID, o.Quantity, o.Variant)
		}
		v, err := lua.ReleaseBatch.Run(ctx, r.RDB, lua.ReleaseKeys(sale), args...).Int64Slice()
		if err != nil {
			return n, err
		}
		n += int(v[1])
		r.N.Add(v[1])
	}
	return n, nil
}

// QuietLogger discards everything.
func QuietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// SQLiteDSN gives a fresh SQLite database.
func SQLiteDSN(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "fg.db") }

// OpenDB opens dsn for the test and closes it after.
func OpenDB(t testing.TB, dsn string) *sqldb.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := sqldb.Open(ctx, dsn)
	if err != nil {
		t.Fatalf("sqldb.Open: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// Reserve runs lua.Reserve for user as the inventory tier would, with order
// id id at now; it returns the script's code and order id.
func Reserve(t testing.TB, ctx context.Context, rdb redis.UniversalClient, sale, user, id string, now time.Time) (int64, string) {
	t.Helper()
	v, err := lua.Reserve.Run(ctx, rdb, lua.ReserveKeys(sale), id, user, 1, now.UnixMilli(), sale).Slice()
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	got, _ := v[1].(string)
	return v[0].(int64), got
}

// Persist moves every stream entry of sale (a sale or a bucket's tag) into
// the database with created_at from the entry, as the order sink does, and
// XDELs them.
func Persist(t testing.TB, ctx context.Context, rdb redis.UniversalClient, db *sqldb.DB, sale string) []flashgate.Order {
	t.Helper()
	msgs, err := rdb.XRange(ctx, lua.OrdersKey(sale), "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE: %v", err)
	}
	if len(msgs) == 0 {
		return nil
	}
	var orders []flashgate.Order
	var ids []string
	for _, m := range msgs {
		en, _ := lua.ReadEntry(m.Values)
		qty, _ := strconv.ParseInt(en.Quantity, 10, 64)
		price, _ := strconv.ParseInt(en.Price, 10, 64)
		ts, _ := strconv.ParseInt(en.Time, 10, 64)
		bucket, _ := strconv.Atoi(en.Bucket) // a bucket's stream: sale is its tag
		saleID, _ := lua.SaleOfTag(sale)
		orders = append(orders, flashgate.Order{
			ID: en.Order, SaleID: cmp.Or(en.Sale, saleID), UserID: en.User,
			Quantity: qty, PriceCents: price, Status: flashgate.StatusPendingPayment,
			CreatedAt: time.UnixMilli(ts).UTC(), Bucket: bucket, Variant: en.Variant,
		})
		ids = append(ids, m.ID)
	}
	if _, err := db.InsertOrders(ctx, orders); err != nil {
		t.Fatalf("InsertOrders: %v", err)
	}
	if err := rdb.XDel(ctx, lua.OrdersKey(sale), ids...).Err(); err != nil {
		t.Fatalf("XDEL: %v", err)
	}
	return orders
}

// Field reads one integer field of a sale hash through c.
func Field(t testing.TB, c redis.Cmdable, sale, f string) int64 {
	t.Helper()
	n, err := c.HGet(context.Background(), lua.SaleKey(sale), f).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("HGET %s %s: %v", sale, f, err)
	}
	return n
}
