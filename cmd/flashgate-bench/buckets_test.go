package main

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/lua"
)

// TestReserveConn: the buckets phase's raw RESP generators run the real
// reserve scripts on a real redis-server, a new buyer each reserve, in a
// bucket's keys, one script per reserve (reserveConn) and in batches
// (reserveManyConn): every reserve counts booked one unit, adds one buyer
// and one stream entry carrying the bucket.
func TestReserveConn(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script *redis.Script
		batch  int
	}{
		{"one a call", lua.Reserve, 1},
		{"batched", lua.ReserveMany, bucketsBatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := redistest.Start(t)
			rdb := srv.Client(t)
			ctx := context.Background()
			tag := lua.BucketTag("gen", 1, 7)
			if err := lua.Prepare.Run(ctx, rdb, lua.SaleKeys(tag), 1_000_000, 0, 1, 100).Err(); err != nil {
				t.Fatal(err)
			}
			if err := lua.SetState.Run(ctx, rdb, lua.SaleKeys(tag), "open").Err(); err != nil {
				t.Fatal(err)
			}
			sha, err := tc.script.Load(ctx, rdb).Result()
			if err != nil {
				t.Fatal(err)
			}
			c, err := net.Dial("tcp", srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			n, err := reserveConn(ctx, c, sha, tc.batch, "gen", tag, 1, true, 0, time.Now().Add(100*time.Millisecond))
			if err != nil {
				t.Fatalf("generator: %v", err)
			}
			if n < bucketsPipeline || n%bucketsPipeline != 0 {
				t.Errorf("reserved: got %d, want a positive multiple of %d", n, bucketsPipeline)
			}
			booked, _ := rdb.HGet(ctx, lua.SaleKey(tag), lua.FieldBooked).Int64()
			buyers, _ := rdb.HLen(ctx, lua.BuyersKey(tag)).Result()
			entries, _ := rdb.XLen(ctx, lua.OrdersKey(tag)).Result()
			if booked != n || buyers != n || entries != n {
				t.Errorf("booked %d, buyers %d, entries %d: want %d each", booked, buyers, entries, n)
			}
			last, err := rdb.XRevRangeN(ctx, lua.OrdersKey(tag), "+", "-", 1).Result()
			if err != nil || len(last) != 1 {
				t.Fatalf("last entry: got %v, %v; want one", last, err)
			}
			if e, _ := lua.ReadEntry(last[0].Values); e.Bucket != "1" || e.Price != "100" || e.Quantity != "1" {
				t.Errorf("last entry: got %+v; want bucket 1, price 100, quantity 1", e)
			}
		})
	}
}
