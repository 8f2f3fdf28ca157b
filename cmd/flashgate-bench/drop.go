package main

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/redis/go-redis/v9"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane"
	"github.com/flashgate/flashgate/fairqueue"
	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/internal/testenv/redistest"
	"github.com/flashgate/flashgate/internal/testenv/testclock"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/lua"
	"github.com/flashgate/flashgate/sqldb"
)

// The drop phase: the drop, run twice on the same crowd — through a
// fair queue and first come — against a real redis-server and SQLite, with
// the gateway's handler called in-process and the control plane's queue
// stepped on a simulated clock (so ten minutes of pre-queue take seconds).
// People (DROP_PEOPLE, default 10,000) open the item page at a random
// moment of the pre-queue and react to the open after a human reaction
// time (log-normal, median 0.7 s); scalpers (DROP_SCALPERS × DROP_ACCOUNTS,
// default 20 × 50) enter every account when the queue opens and fire the
// moment the sale says open. Everyone has a token and pays a proof of work
// (DROP_MAXNUMBER, default 1,000). Then Redis's bytes per entrant with
// DROP_ENTRANTS (default 1,000,000) entrants of one fair queue.

// dropResult is what the drop phase measured.
type dropResult struct {
	People, Scalpers, Accounts, Units int
	MaxNumber                         int64
	ScalperShareEntrants              float64 // accounts / all entrants
	FairScalperUnits, FCScalperUnits  int
	FairSoldOut, FCSoldOut            int // units sold
	FairRounds                        int
	FairElapsed                       time.Duration
	Entrants                          int
	BytesPerEntrant                   float64       // INFO used_memory delta / entrants
	HashBytesPerEntrant               float64       // MEMORY USAGE of the queue hash / entrants
	JournalBytesPerEntrant            float64       // the journal stream's used_memory / entrants, until the leader's step trims it
	LateBytesPerEntrant               float64       // the same, entering after the start (hash + arrival list)
	RankElapsed                       time.Duration // the leader's start step over Entrants: read, rank, write ranks
	RankedBytesPerEntrant             float64       // used_memory per entrant once ranked
	AdmitElapsed                      time.Duration // one admission tick of that queue after its start
	ArchiveHeld, ArchiveFreed         int64         // used_memory the queue held before its archive, and what the archive gave back
	ArchiveElapsed                    time.Duration // from the close until the leader archived it
}

// dropAccount is one account of the crowd.
type dropAccount struct {
	user    string
	token   string
	ticket  string
	scalper bool
	arrive  time.Duration // into the pre-queue
	react   time.Duration // after the open (first come) or the admission
	bought  bool
}

func (b *bench) dropPhase(ctx context.Context) error {
	people, err := envInt("DROP_PEOPLE", 10000)
	if err != nil {
		return err
	}
	scalpers, err := envInt("DROP_SCALPERS", 20)
	if err != nil {
		return err
	}
	accounts, err := envInt("DROP_ACCOUNTS", 50)
	if err != nil {
		return err
	}
	units, err := envInt("DROP_UNITS", 500)
	if err != nil {
		return err
	}
	maxnum, err := envInt("DROP_MAXNUMBER", 1000)
	if err != nil {
		return err
	}
	entrants, err := envInt("DROP_ENTRANTS", 1_000_000)
	if err != nil {
		return err
	}
	d, stop, err := b.newDropRun(ctx)
	if err != nil {
		return err
	}
	defer stop()
	rdb, cp, clock, opens, secret := d.rdb, d.cp, d.clock, d.opens, []byte(b.secret)
	res := &dropResult{People: people, Scalpers: scalpers, Accounts: scalpers * accounts, Units: units, MaxNumber: int64(maxnum)}
	b.rep.drop = res

	// The crowd, the same for both sales.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 19))
	prequeue := 600 * time.Second
	var crowd []*dropAccount
	mint := func(user string) string {
		tok, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": user, "exp": opens.Add(48 * time.Hour).Unix()}).SignedString(secret)
		return tok
	}
	for i := range people {
		u := fmt.Sprintf("person-%06d", i)
		crowd = append(crowd, &dropAccount{user: u, token: mint(u), arrive: time.Duration(rng.Int64N(int64(prequeue))),
			react: time.Duration(0.7 * math.Exp(0.4*rng.NormFloat64()) * float64(time.Second))})
	}
	for s := range scalpers {
		for a := range accounts {
			u := fmt.Sprintf("scalper-%02d-%03d", s, a)
			// They watch GET /api/sales/{id} (every 100 ms) and fire at once.
			crowd = append(crowd, &dropAccount{user: u, token: mint(u), scalper: true, arrive: time.Duration(rng.Int64N(int64(time.Second))),
				react: time.Duration(rng.Int64N(int64(100 * time.Millisecond)))})
		}
	}
	res.ScalperShareEntrants = float64(res.Accounts) / float64(len(crowd))

	// The fair queue.
	t0 := time.Now()
	starts := opens.Add(prequeue)
	if _, err := cp.CreateSale(ctx, flashgate.Sale{ID: "drop-fair", Name: "Drop", PriceCents: 100, Total: int64(units), StartsAt: &starts,
		Queue: flashgate.QueueFair, ChallengeMaxNumber: int64(maxnum)}); err != nil {
		return err
	}
	if err := d.step("drop-fair"); err != nil {
		return err
	}
	slices.SortFunc(crowd, func(a, b *dropAccount) int { return int(a.arrive - b.arrive) })
	for _, a := range crowd {
		clock.Set(opens.Add(a.arrive))
		if err := d.enter("drop-fair", a); err != nil {
			return err
		}
	}
	clock.Set(starts)
	if err := cp.Start(ctx, "drop-fair"); err != nil {
		return err
	}
	for round := 0; round < 1000; round++ {
		if err := d.step("drop-fair"); err != nil {
			return err
		}
		sold, err := rdb.HGet(ctx, lua.SaleKey("drop-fair"), lua.FieldBooked).Int()
		if err != nil {
			return err
		}
		if sold >= units {
			res.FairRounds = round
			break
		}
		// Everyone admitted buys after their reaction time: all of them
		// within the window, so their order does not matter.
		for _, a := range crowd {
			if a.bought {
				continue
			}
			code, _, h := d.call("POST", "/api/sales/drop-fair/orders", a.token, a.ticket, "")
			switch code {
			case 201:
				a.bought = true
				a.ticket = string(h.Peek("X-Queue-Ticket"))
			case 409:
			default:
				return fmt.Errorf("fair drop: %s buys: %d", a.user, code)
			}
		}
		clock.Add(5 * time.Second)
	}
	for _, a := range crowd {
		if a.bought {
			res.FairSoldOut++
			if a.scalper {
				res.FairScalperUnits++
			}
		}
	}
	res.FairElapsed = time.Since(t0)
	// The winners are the first units in the revealed seed's order.
	_, body, _ := d.call("GET", "/api/sales/drop-fair", "", "", "")
	var pub struct {
		Queue struct {
			Seed string `json:"seed"`
		} `json:"queue"`
	}
	seed, err := hex.DecodeString(func() string { _ = json.Unmarshal(body, &pub); return pub.Queue.Seed }())
	if err != nil || len(seed) != 32 {
		return fmt.Errorf("fair drop: no revealed seed in %s", body)
	}
	order := slices.Clone(crowd)
	slices.SortFunc(order, func(a, b *dropAccount) int {
		return strings.Compare(fairqueue.Rank(seed, "drop-fair", a.user), fairqueue.Rank(seed, "drop-fair", b.user))
	})
	for i, a := range order {
		if a.bought != (i < res.FairSoldOut) {
			return fmt.Errorf("fair drop: %s at seed position %d bought=%v; the first %d should have", a.user, i+1, a.bought, res.FairSoldOut)
		}
	}

	// First come on the same crowd: everyone fires at the open plus their
	// reaction time; the gateway answers them in that order.
	fcStart := clock.Now().Add(time.Minute)
	if _, err := cp.CreateSale(ctx, flashgate.Sale{ID: "drop-fc", Name: "Drop", PriceCents: 100, Total: int64(units), StartsAt: &fcStart}); err != nil {
		return err
	}
	clock.Set(fcStart)
	if err := cp.Start(ctx, "drop-fc"); err != nil {
		return err
	}
	if err := d.waitOpen("drop-fc"); err != nil {
		return err
	}
	slices.SortFunc(crowd, func(a, b *dropAccount) int { return int(a.react - b.react) })
	for _, a := range crowd {
		code, _, _ := d.call("POST", "/api/sales/drop-fc/orders", a.token, "", "")
		if code == 201 {
			res.FCSoldOut++
			if a.scalper {
				res.FCScalperUnits++
			}
		}
	}

	// Redis bytes per entrant at scale.
	if err := d.memoryAtScale(entrants, res); err != nil {
		return err
	}
	b.logf("drop: fair %d of %d units to scalpers (%.1f%% of entrants); first come %d of %d; %.0f bytes per entrant",
		res.FairScalperUnits, res.FairSoldOut, 100*res.ScalperShareEntrants, res.FCScalperUnits, res.FCSoldOut, res.BytesPerEntrant)
	// The 1.5× bound is checked where chance alone rarely breaks it: at
	// least 30 scalpers' units expected (the default crowd expects 45).
	expected := res.ScalperShareEntrants * float64(res.FairSoldOut)
	if share := float64(res.FairScalperUnits) / float64(max(res.FairSoldOut, 1)); expected >= 30 && (share > 1.5*res.ScalperShareEntrants || share < res.ScalperShareEntrants/1.5) {
		return fmt.Errorf("fair drop: scalpers' share of units %.3f is not within 1.5× of their share of entrants %.3f", share, res.ScalperShareEntrants)
	}
	return nil
}

// newDropRun starts the drop phase's tiers: a redis-server, SQLite, the
// inventory, the control plane and the gateway on a clock set to the
// pre-queue's opening; stop stops them.
func (b *bench) newDropRun(ctx context.Context) (*dropRun, func(), error) {
	bin, err := lookPath("redis-server")
	if err != nil {
		return nil, nil, err
	}
	srv, err := redistest.StartServer(bin, b.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("starting redis-server: %w", err)
	}
	stops := []func(){srv.Stop}
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 8})
	stops = append(stops, func() { _ = rdb.Close() })
	db, err := sqldb.Open(ctx, "sqlite://"+filepath.Join(b.dir, "drop.db"))
	if err != nil {
		stop()
		return nil, nil, err
	}
	stops = append(stops, func() { _ = db.Close() })
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	opens := time.Now().Truncate(time.Second)
	clock := testclock.New(opens)
	inv := inventory.New(rdb, inventory.Config{Logger: quiet, Clock: clock})
	cp, err := controlplane.New(controlplane.Config{Redis: rdb, Store: db, Releaser: inv, AdminToken: b.adminTok, Logger: quiet, Clock: clock})
	if err != nil {
		stop()
		return nil, nil, err
	}
	gw, err := gateway.New(gateway.Config{Primary: rdb, Reserver: inv, Catalog: db, Orders: cp, Draws: cp, JWTSecret: []byte(b.secret),
		Logger: quiet, Clock: clock, UserRate: -1, SaleRate: -1, StateRefresh: 5 * time.Millisecond,
		CatalogRefresh: 20 * time.Millisecond, ShutdownDelay: -1})
	if err != nil {
		stop()
		return nil, nil, err
	}
	gw.Start()
	stops = append(stops, func() { _ = gw.Close() })
	fence, err := rdb.Incr(ctx, lua.FenceKey()).Result()
	if err != nil {
		stop()
		return nil, nil, err
	}
	return &dropRun{ctx: ctx, rdb: rdb, db: db, cp: cp, gw: gw, clock: clock, opens: opens, fence: fence}, stop, nil
}

// dropMemoryPhase is the drop's memory part alone (PHASES=drop-memory):
// a fair queue of DROP_ENTRANTS (1,000,000) entrants.
func (b *bench) dropMemoryPhase(ctx context.Context) error {
	entrants, err := envInt("DROP_ENTRANTS", 1_000_000)
	if err != nil {
		return err
	}
	d, stop, err := b.newDropRun(ctx)
	if err != nil {
		return err
	}
	defer stop()
	res := &dropResult{}
	b.rep.drop = res
	if err := d.memoryAtScale(entrants, res); err != nil {
		return err
	}
	b.logf("drop-memory: %d entrants: %.0f bytes per entrant (journal %.0f more until the leader's step), ranked in %v, admission tick %v, archive gave back %d of %d bytes",
		entrants, res.BytesPerEntrant, res.JournalBytesPerEntrant, res.RankElapsed.Round(time.Millisecond), res.AdmitElapsed.Round(time.Microsecond), res.ArchiveFreed, res.ArchiveHeld)
	return nil
}

// memoryAtScale measures a fair queue of entrants entrants in Redis: the
// bytes per entrant before the start (the journal stream apart: the leader
// writes it to the database and trims it at its next step), the leader's
// ranking step at the start, the first admission tick, and what the
// sale's archive gives back; then a late queue's bytes per entrant.
func (d *dropRun) memoryAtScale(entrants int, res *dropResult) error {
	// The control plane opens the queue (it alone derives the seed).
	res.Entrants = entrants
	memStart := d.clock.Now().Add(time.Minute)
	if _, err := d.cp.CreateSale(d.ctx, flashgate.Sale{ID: "drop-mem", Name: "Memory", Total: 100, StartsAt: &memStart, Queue: flashgate.QueueFair,
		PrequeueSeconds: 600}); err != nil {
		return err
	}
	memSale, err := d.db.Sale(d.ctx, "drop-mem")
	if err != nil {
		return err
	}
	if err := d.cp.QueueStep(d.ctx, memSale, d.fence); err != nil {
		return fmt.Errorf("opening the memory queue: %w", err)
	}
	m0, err := d.usedMemory()
	if err != nil {
		return err
	}
	if res.BytesPerEntrant, res.HashBytesPerEntrant, res.JournalBytesPerEntrant, err = d.fill("drop-mem", entrants); err != nil {
		return err
	}
	// The start of that queue: the leader reads, ranks and writes every
	// entrant's rank.
	d.clock.Set(memStart)
	before, err := d.usedMemory()
	if err != nil {
		return err
	}
	t1 := time.Now()
	if err := d.cp.QueueStep(d.ctx, memSale, d.fence); err != nil {
		return fmt.Errorf("ranking %d entrants: %w", entrants, err)
	}
	res.RankElapsed = time.Since(t1)
	after, err := d.usedMemory()
	if err != nil {
		return err
	}
	res.RankedBytesPerEntrant = res.BytesPerEntrant + float64(after-before)/float64(entrants)
	if err := d.admitAndArchive(memSale, m0, res); err != nil {
		return err
	}
	if _, res.LateBytesPerEntrant, _, err = d.memory("drop-mem-late", min(entrants, 100_000), true); err != nil {
		return err
	}
	return nil
}

// dropSection is the report's section of the drop phase.
func (r *report) dropSection() string {
	d := r.drop
	if d == nil {
		return ""
	}
	var sb strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&sb, format, a...) }
	p("\n## Drop: a fair queue against first come\n\n")
	if d.People > 0 {
		p("%s people who enter at a random moment of a 10-minute pre-queue and react to the open after a human reaction time (log-normal, median 0.7 s), and %d scalpers with %d accounts each who enter at the queue's opening and fire the moment the sale opens; every entry pays a proof of work (maxnumber %s); %s units, one per buyer. The gateway's handler runs in-process on a real redis-server, the control plane's queue on a simulated clock (`cmd/flashgate-bench/drop.go`).\n\n",
			num(float64(d.People)), d.Scalpers, d.Accounts/max(d.Scalpers, 1), num(float64(d.MaxNumber)), num(float64(d.Units)))
		p("| | scalpers' units | their share | their share of the entrants |\n|---|---|---|---|\n")
		p("| fair queue | %d of %d | **%.1f%%** | %.1f%% |\n", d.FairScalperUnits, d.FairSoldOut, 100*float64(d.FairScalperUnits)/float64(max(d.FairSoldOut, 1)), 100*d.ScalperShareEntrants)
		p("| first come, the same crowd | %d of %d | **%.1f%%** | %.1f%% |\n", d.FCScalperUnits, d.FCSoldOut, 100*float64(d.FCScalperUnits)/float64(max(d.FCSoldOut, 1)), 100*d.ScalperShareEntrants)
	} else {
		p("The drop's memory part alone (`PHASES=drop-memory`).\n")
	}
	p("\nRedis memory of a fair queue with %s entrants before the start: **%.0f bytes per entrant** (`INFO memory` used_memory delta; plus %.0f in the journal stream until the leader's next step writes it to the database and trims it, which the bench does by deleting the stream); the queue hash's `MEMORY USAGE` is %.0f bytes per entrant; entering after the start (hash and arrival list, %s entrants) costs %.0f. A proof-of-work solution adds a marker key until its challenge expires (5 minutes). At the start the leader read, ranked and wrote the ranks of those %s entrants in **%s** (%.0f bytes per entrant once ranked).\n",
		num(float64(d.Entrants)), d.BytesPerEntrant, d.JournalBytesPerEntrant, d.HashBytesPerEntrant, num(float64(min(d.Entrants, 100_000))), d.LateBytesPerEntrant,
		num(float64(d.Entrants)), d.RankElapsed.Round(time.Millisecond), d.RankedBytesPerEntrant)
	p("\nThe first admission tick after that start took **%s**. Closed, the sale was archived by the leader %s later: used_memory fell by **%s bytes** of the %s the queue held (%.0f%%).\n",
		d.AdmitElapsed.Round(time.Microsecond), d.ArchiveElapsed.Round(time.Millisecond), num(float64(d.ArchiveFreed)), num(float64(d.ArchiveHeld)),
		100*float64(d.ArchiveFreed)/float64(max(d.ArchiveHeld, 1)))
	return sb.String()
}
