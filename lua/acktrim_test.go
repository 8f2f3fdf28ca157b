package lua_test

import (
	"context"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate/lua"
)

// ackTrim runs lua.AckTrim on saleID's stream and returns {acked, removed}.
func ackTrim(ctx context.Context, rdb *redis.Client, ids ...string) ([]int64, error) {
	args := []any{lua.SinkGroup}
	for _, id := range ids {
		args = append(args, id)
	}
	return lua.AckTrim.Run(ctx, rdb, lua.AckTrimKeys(saleID), args...).Int64Slice()
}

// streamIDs returns the ids in saleID's stream.
func streamIDs(t *testing.T, ctx context.Context, rdb *redis.Client) []string {
	t.Helper()
	msgs, err := rdb.XRange(ctx, lua.OrdersKey(saleID), "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE: %v", err)
	}
	ids := []string{}
	for _, m := range msgs {
		ids = append(ids, m.ID)
	}
	return ids
}

// read delivers up to n new entries to consumer and returns their ids.
func read(t *testing.T, ctx context.Context, rdb *redis.Client, consumer string, n int) []string {
	t.Helper()
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: lua.SinkGroup, Consumer: consumer,
		Streams: []string{lua.OrdersKey(saleID), ">"}, Count: int64(n), Block: -1,
	}).Result()
	if err == redis.Nil {
		return nil
	}
	if err != nil {
		t.Fatalf("XREADGROUP: %v", err)
	}
	var ids []string
	for _, m := range res[0].Messages {
		ids = append(ids, m.ID)
	}
	return ids
}

// addIDs adds entries with the given ids (or "*") to saleID's stream.
func addIDs(t *testing.T, ctx context.Context, rdb *redis.Client, ids ...string) []string {
	t.Helper()
	var out []string
	for _, id := range ids {
		got, err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(saleID), ID: id, Values: []any{"order", "o"}}).Result()
		if err != nil {
			t.Fatalf("XADD %s: %v", id, err)
		}
		out = append(out, got)
	}
	return out
}

func group(t *testing.T, ctx context.Context, rdb *redis.Client) {
	t.Helper()
	if err := rdb.XGroupCreateMkStream(ctx, lua.OrdersKey(saleID), lua.SinkGroup, "0").Err(); err != nil {
		t.Fatalf("XGROUP CREATE: %v", err)
	}
}

// TestAckTrim: what AckTrim acknowledges and removes, from ids that compare
// as numbers (9 < 10), a sequence at its maximum, and sinks that commit out
// of order.
func TestAckTrim(t *testing.T) {
	bs := backends(t)
	type step struct {
		read     map[string]int // consumer → entries to read first
		ack      []string       // ids to pass to AckTrim
		want     []int64
		wantLeft []string
	}
	cases := []struct {
		name     string
		realOnly bool     // only on redis-server
		added    []string // ids to XADD before the group exists
		later    []string // ids to XADD after the group was created
		steps    []step
	}{
		{
			name:  "in order",
			added: []string{"1-1", "1-2", "1-3", "2-0"},
			steps: []step{
				{read: map[string]int{"a": 2}, ack: []string{"1-1", "1-2"}, want: []int64{2, 2}, wantLeft: []string{"1-3", "2-0"}},
				{read: map[string]int{"a": 2}, ack: []string{"1-3", "2-0"}, want: []int64{2, 2}, wantLeft: []string{}},
			},
		},
		{
			name:  "ids that compare as numbers",
			added: []string{"9-9", "9-10", "10-0", "10-99", "10-100", "100-0"},
			steps: []step{
				{read: map[string]int{"a": 1}, ack: []string{"9-9"}, want: []int64{1, 1}, wantLeft: []string{"9-10", "10-0", "10-99", "10-100", "100-0"}},
				{read: map[string]int{"a": 3}, ack: []string{"9-10", "10-0", "10-99"}, want: []int64{3, 3}, wantLeft: []string{"10-100", "100-0"}},
				{read: map[string]int{"b": 1}, ack: []string{"10-100"}, want: []int64{1, 1}, wantLeft: []string{"100-0"}},
			},
		},
		{
			// miniredis takes "3" for another id than "3-0".
			name:     "ids without a sequence",
			realOnly: true,
			added:    []string{"1-1", "2-0", "3-0"},
			steps: []step{
				{read: map[string]int{"a": 2, "b": 1}, ack: []string{"3"}, want: []int64{1, 1}, wantLeft: []string{"1-1", "2-0"}},
				{ack: []string{"1-1", "2"}, want: []int64{2, 2}, wantLeft: []string{}},
			},
		},
		{
			name:  "sequence at its maximum",
			added: []string{"5-18446744073709551615", "6-0"},
			steps: []step{
				{read: map[string]int{"a": 1}, ack: []string{"5-18446744073709551615"}, want: []int64{1, 1}, wantLeft: []string{"6-0"}},
			},
		},
		{
			name:  "the second batch committed first",
			added: []string{"1-1", "1-2", "1-3", "1-4"},
			steps: []step{
				{read: map[string]int{"a": 2, "b": 2}, ack: []string{"1-3", "1-4"}, want: []int64{2, 2}, wantLeft: []string{"1-1", "1-2"}},
				{ack: []string{"1-1", "1-2"}, want: []int64{2, 2}, wantLeft: []string{}},
			},
		},
		{
			name:  "a middle batch committed first",
			added: []string{"1-1", "1-2", "1-3", "1-4", "1-5", "1-6"},
			steps: []step{
				{read: map[string]int{"a": 2, "b": 2, "c": 2}, ack: []string{"1-3", "1-4"}, want: []int64{2, 2}, wantLeft: []string{"1-1", "1-2", "1-5", "1-6"}},
				{ack: []string{"1-1", "1-2"}, want: []int64{2, 2}, wantLeft: []string{"1-5", "1-6"}},
				{ack: []string{"1-5", "1-6"}, want: []int64{2, 2}, wantLeft: []string{}},
			},
		},
		{
			name:  "entries never delivered stay",
			added: []string{"1-1", "1-2"},
			later: []string{"3-0", "4-0"},
			steps: []step{
				{read: map[string]int{"a": 1}, ack: []string{"1-1"}, want: []int64{1, 1}, wantLeft: []string{"1-2", "3-0", "4-0"}},
				{read: map[string]int{"a": 2}, ack: []string{"3-0"}, want: []int64{1, 1}, wantLeft: []string{"1-2", "4-0"}},
				{ack: []string{"1-2"}, want: []int64{1, 1}, wantLeft: []string{"4-0"}},
			},
		},
		{
			name:  "acknowledged twice",
			added: []string{"1-1", "1-2"},
			steps: []step{
				{read: map[string]int{"a": 2}, ack: []string{"1-1"}, want: []int64{1, 1}, wantLeft: []string{"1-2"}},
				{ack: []string{"1-1"}, want: []int64{0, 0}, wantLeft: []string{"1-2"}},
				{ack: []string{"1-2", "1-2"}, want: []int64{1, 1}, wantLeft: []string{}},
			},
		},
		{
			name:  "no ids, all pending",
			added: []string{"1-1", "1-2"},
			steps: []step{
				{read: map[string]int{"a": 2}, ack: nil, want: []int64{0, 0}, wantLeft: []string{"1-1", "1-2"}},
			},
		},
	}
	for _, c := range cases {
		bs := bs
		if c.realOnly {
			bs = bs[:1]
		}
		forEach(t, bs, c.name, func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			addIDs(t, ctx, rdb, c.added...)
			group(t, ctx, rdb)
			addIDs(t, ctx, rdb, c.later...)
			for i, s := range c.steps {
				for _, consumer := range slices.Sorted(maps.Keys(s.read)) {
					read(t, ctx, rdb, consumer, s.read[consumer])
				}
				got, err := ackTrim(ctx, rdb, s.ack...)
				if err != nil {
					t.Fatalf("step %d: AckTrim: %v", i, err)
				}
				if !reflect.DeepEqual(got, s.want) {
					t.Errorf("step %d: got %v, want %v", i, got, s.want)
				}
				if left := streamIDs(t, ctx, rdb); !reflect.DeepEqual(left, s.wantLeft) {
					t.Errorf("step %d: stream holds %v, want %v", i, left, s.wantLeft)
				}
			}
		})
	}
}

// TestAckTrimWithoutStreamOrGroup: AckTrim without the stream, or without
// the sink's group, changes nothing and answers {0, 0}; a bad id is an
// error before any write.
func TestAckTrimWithoutStreamOrGroup(t *testing.T) {
	forEach(t, backends(t), "no stream", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		got, err := ackTrim(ctx, rdb, "1-1")
		if err != nil || !reflect.DeepEqual(got, []int64{0, 0}) {
			t.Errorf("got %v, %v, want [0 0], nil", got, err)
		}
	})
	forEach(t, backends(t), "no group", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		addIDs(t, ctx, rdb, "1-1", "1-2")
		got, err := ackTrim(ctx, rdb, "1-1")
		if err != nil || !reflect.DeepEqual(got, []int64{0, 0}) {
			t.Errorf("got %v, %v, want [0 0], nil", got, err)
		}
		if left := streamIDs(t, ctx, rdb); !reflect.DeepEqual(left, []string{"1-1", "1-2"}) {
			t.Errorf("stream holds %v, want [1-1 1-2]", left)
		}
	})
	forEach(t, backends(t), "bad id", func(t *testing.T, ctx context.Context, rdb *redis.Client) {
		addIDs(t, ctx, rdb, "1-1")
		group(t, ctx, rdb)
		read(t, ctx, rdb, "a", 1)
		if _, err := ackTrim(ctx, rdb, "1-1", "x"); err == nil {
			t.Errorf("got no error for id x")
		}
		if left := streamIDs(t, ctx, rdb); !reflect.DeepEqual(left, []string{"1-1"}) {
			t.Errorf("stream holds %v, want [1-1]", left)
		}
	})
}

// TestAckTrimKeepsTheBacklog drives three consumers of the sink's group at
// random (new entries, reads, commits of any subset of a consumer's pending
// entries, claims of another's, dead-lettering as the sink does it, commits
// of entries committed before) and checks after every step that the stream
// holds exactly the entries not committed, so its length is the backlog.
func TestAckTrimKeepsTheBacklog(t *testing.T) {
	bs := backends(t)
	for _, seed := range []uint64{1, 2, 3} {
		forEach(t, bs, "seed "+strconv.FormatUint(seed, 10), func(t *testing.T, ctx context.Context, rdb *redis.Client) {
			rng := rand.New(rand.NewPCG(seed, 7))
			key := lua.OrdersKey(saleID)
			consumers := []string{"a", "b", "c"}
			var want []string // entries not committed, in id order
			pending := map[string][]string{}
			var committed []string
			ms, seq := 1, 0
			add := func(n int) {
				for range n {
					if rng.IntN(3) == 0 {
						ms, seq = ms+1+rng.IntN(20), 0
					} else {
						seq++
					}
					want = append(want, addIDs(t, ctx, rdb, strconv.Itoa(ms)+"-"+strconv.Itoa(seq))...)
				}
			}
			commit := func(ids []string) {
				for _, id := range ids {
					want = slices.DeleteFunc(want, func(x string) bool { return x == id })
					for c := range pending {
						pending[c] = slices.DeleteFunc(pending[c], func(x string) bool { return x == id })
					}
				}
				committed = append(committed, ids...)
			}
			// pick takes a random subset of a consumer's pending entries.
			pick := func(c string) []string {
				var ids []string
				for _, id := range pending[c] {
					if rng.IntN(2) == 0 {
						ids = append(ids, id)
					}
				}
				return ids
			}
			add(rng.IntN(5))
			group(t, ctx, rdb)
			for step := range 300 {
				c := consumers[rng.IntN(len(consumers))]
				var what string
				switch op := rng.IntN(10); {
				case op < 3:
					what = "add"
					add(1 + rng.IntN(6))
				case op < 6:
					what = "read"
					pending[c] = append(pending[c], read(t, ctx, rdb, c, 1+rng.IntN(8))...)
				case op < 8:
					ids := pick(c)
					if rng.IntN(4) == 0 && len(committed) > 0 {
						ids = append(ids, committed[rng.IntN(len(committed))])
					}
					what = "commit " + strconv.Itoa(len(ids))
					if _, err := ackTrim(ctx, rdb, ids...); err != nil {
						t.Fatalf("step %d: AckTrim: %v", step, err)
					}
					commit(ids)
				case op < 9:
					from := consumers[rng.IntN(len(consumers))]
					ids := pick(from)
					what = "claim " + strconv.Itoa(len(ids))
					if len(ids) == 0 || from == c {
						continue
					}
					if err := rdb.XClaimJustID(ctx, &redis.XClaimArgs{
						Stream: key, Group: lua.SinkGroup, Consumer: c, Messages: ids,
					}).Err(); err != nil {
						t.Fatalf("step %d: XCLAIM: %v", step, err)
					}
					pending[from] = slices.DeleteFunc(pending[from], func(x string) bool { return slices.Contains(ids, x) })
					pending[c] = append(pending[c], ids...)
				default:
					ids := pick(c)
					if len(ids) == 0 {
						continue
					}
					ids = ids[:1]
					what = "dead-letter"
					_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
						p.XAck(ctx, key, lua.SinkGroup, ids[0])
						p.XDel(ctx, key, ids[0])
						return nil
					})
					if err != nil {
						t.Fatalf("step %d: dead-lettering: %v", step, err)
					}
					commit(ids)
				}
				got := streamIDs(t, ctx, rdb)
				if !slices.Equal(got, want) {
					t.Fatalf("step %d (%s by %s): stream holds %v, want %v", step, what, c, got, want)
				}
				if n, err := rdb.XLen(ctx, key).Result(); err != nil || n != int64(len(want)) {
					t.Fatalf("step %d (%s by %s): XLEN got %d, %v, want %d", step, what, c, n, err, len(want))
				}
			}
		})
	}
}
