package main

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testwait"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/ordersink"
)

// stampStore is an ordersink.Store that notes when it first stored each
// order.
type stampStore struct {
	mu     sync.Mutex
	stored map[string]time.Time
}

func (s *stampStore) InsertOrders(_ context.Context, orders []flashgate.Order) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, o := range orders {
		if _, ok := s.stored[o.ID]; !ok {
			s.stored[o.ID] = time.Now()
			n++
		}
	}
	return n, nil
}

// at returns when the order id was first stored, zero if never.
func (s *stampStore) at(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stored[id]
}

// TestSinkFollowsSentinelPromotion kills (kill -9) the primary of a
// Sentinel set-up under the order sink's client (as `ordersink` opens it)
// and a drainer. A call sent while the Sentinel still names the dead
// primary waits and is answered by the replica it promotes, within a few
// dial retries of its naming it; and the drainer stores an entry the
// promoted replica holds within half a second of that naming. Before, the
// call failed at once (connection refused), and after a few failed dials
// go-redis dialled only once a second, so the drainer reached the promoted
// replica up to a second and a half after the Sentinel named it.
func TestSinkFollowsSentinelPromotion(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	sen := redistest.StartSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st := newStack(&Config{LogLevel: "error"}, io.Discard)
	defer st.close()
	rdb, err := st.blockingReader(ctx, sen.URL(), 500*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	const sale = "follow"
	primary := sen.Primary.Client(t)
	if err := primary.SAdd(ctx, lua.SalesKey(), sale).Err(); err != nil {
		t.Fatal(err)
	}
	entry := func(id string) map[string]any {
		return map[string]any{lua.EntryCompact: id + " 1 100 " + strconv.FormatInt(time.Now().UnixMilli(), 10) + "  u-" + id}
	}
	store := &stampStore{stored: map[string]time.Time{}}
	d := ordersink.New(rdb, store, ordersink.Config{Consumer: "c1", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	runDone := make(chan error, 1)
	go func() { runDone <- d.Run(ctx) }()
	defer func() { _ = d.Close(); <-runDone }()
	if err := primary.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: entry("before")}).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Eventually(t, 10*time.Second, func() bool { return !store.at("before").IsZero() }, "the entry written before the kill to be stored")

	// The Sentinel names the promoted replica: noted when it does (the
	// wait's checks are at most 20 ms apart).
	sc := redis.NewSentinelClient(&redis.Options{Addr: sen.Addr})
	defer sc.Close()
	named := make(chan time.Time, 1)
	go func() {
		left, _ := ctx.Deadline()
		if _, ok := testwait.For(time.Until(left), func() bool {
			addr, err := sc.GetMasterAddrByName(ctx, sen.Name).Result()
			return err == nil && len(addr) == 2 && addr[0]+":"+addr[1] == sen.Replica.Addr
		}); ok {
			named <- time.Now()
			return
		}
		close(named)
	}()

	sen.Primary.Stop() // SIGKILL
	killed := time.Now()
	type answer struct {
		err error
		at  time.Time
	}
	ping := make(chan answer, 1)
	go func() {
		err := rdb.Ping(ctx).Err()
		ping <- answer{err, time.Now()}
	}()
	// Once the replica says it is the primary (before the Sentinel names
	// it), it takes an entry of its own.
	replica := sen.Replica.Client(t)
	if _, ok := testwait.For(30*time.Second, func() bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:master")
	}); !ok {
		t.Fatal("the replica never said role:master")
	}
	promoted := time.Now()
	if err := replica.XAdd(ctx, &redis.XAddArgs{Stream: lua.OrdersKey(sale), Values: entry("after")}).Err(); err != nil {
		t.Fatal(err)
	}
	namedAt, ok := <-named
	if !ok {
		t.Fatal("the Sentinel never named the replica")
	}
	t.Logf("killed; the replica said role:master %v later, the Sentinel named it %v after that",
		promoted.Sub(killed).Round(time.Millisecond), namedAt.Sub(promoted).Round(time.Millisecond))

	p := <-ping
	switch {
	case p.err != nil:
		t.Errorf("a call sent %v before the Sentinel named the promoted replica: got %v, want its answer", namedAt.Sub(killed).Round(time.Millisecond), p.err)
	case p.at.Sub(namedAt) > 300*time.Millisecond:
		t.Errorf("a call sent before the Sentinel named the promoted replica: answered %v after the naming, want within 300ms", p.at.Sub(namedAt).Round(time.Millisecond))
	}
	if _, ok := testwait.For(10*time.Second, func() bool { return !store.at("after").IsZero() }); !ok {
		t.Fatal("the promoted replica's entry was never stored")
	}
	if got := store.at("after").Sub(namedAt); got > 500*time.Millisecond {
		t.Errorf("the promoted replica's entry: stored %v after the Sentinel named it, want within 500ms", got.Round(time.Millisecond))
	} else {
		t.Logf("the promoted replica's entry stored %v after the Sentinel named it", got.Round(time.Millisecond))
	}
}
