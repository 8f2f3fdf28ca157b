package explore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// errKilled is what every external call of a killed actor returns: its
// process is gone, so nothing it would do after the kill happens.
var errKilled = errors.New("explore: actor killed")

// stuckAfter is how long the scheduler waits for the running actor to
// reach its next yield point before it calls the schedule stuck (an actor
// blocked on something a parked actor holds).
const stuckAfter = 30 * time.Second

// maxSteps bounds the interleaved part of a schedule; past it the actors
// left run one after the other.
const maxSteps = 3000

// actorKey is the context key of the actor a goroutine runs for.
type actorKey struct{}

// actor is one participant of a schedule: a goroutine that runs only while
// the scheduler lets it, between two yield points.
type actor struct {
	id     int
	name   string
	run    func(ctx context.Context)
	wake   chan struct{}
	at     string // the step it is parked before
	prev   string // the step it took last
	prio   int    // its priority under the PCT strategy
	done   bool
	killed bool // read by its goroutine only after a wake
	// cond, while set, is what the actor awaits (Await): the scheduler
	// picks it only once cond holds, or when every actor awaits something,
	// and then gaveUp tells it that it stopped waiting.
	cond   func() bool
	gaveUp bool
	// hold, while above 0, keeps the actor back (steps to go) when others
	// are ready: set, at random, after it ran a Lua script, so that other
	// actors act between its Redis step and the database step after it.
	hold int
}

// event is what an actor tells the scheduler: it parked before step at,
// or it finished.
type event struct {
	a    *actor
	at   string
	done bool
}

// Sched runs a schedule: the actors' steps, one actor at a time, in the
// order its seeded generator picks. Exactly one goroutine (an actor's or
// the scheduler's) touches it at a time; the channels order them.
type Sched struct {
	rng    *rand.Rand
	pct    bool  // PCT (priorities with change points) instead of uniform picks
	change []int // the steps at which the running actor's priority drops (PCT)
	killAt int   // the step at which the picked actor is killed (-1: none)
	// killDual delays the kill to an actor parked between a Lua script it
	// ran and the database call after it (a dual write half done).
	killDual bool
	onKill   func(a *actor)
	actors   []*actor
	back     chan event
	trace    []string
	steps    int
	low      int // the lowest priority handed out (PCT)
	// after, when set, is called by the scheduler after each step with
	// the actor that moved and the step it took, while every actor is
	// parked: the world's checks between steps and its long holds. It
	// draws nothing from rng, so it changes no schedule by itself.
	after func(a *actor, ran string)
}

// newSched returns a scheduler whose every choice derives from rng.
func newSched(rng *rand.Rand) *Sched {
	s := &Sched{rng: rng, back: make(chan event), killAt: -1, low: 0}
	s.pct = rng.IntN(2) == 0
	for range 1 + rng.IntN(4) {
		s.change = append(s.change, rng.IntN(150))
	}
	return s
}

// Spawn adds an actor; it takes its first step when the scheduler picks it.
// Called by the scheduler's goroutine or by the running actor.
func (s *Sched) Spawn(name string, run func(ctx context.Context)) {
	a := &actor{id: len(s.actors), name: fmt.Sprintf("%s#%d", name, len(s.actors)), run: run,
		wake: make(chan struct{}), at: "start", prio: 1000 + s.rng.IntN(1000)}
	s.actors = append(s.actors, a)
	go func() {
		<-a.wake
		ctx := context.WithValue(context.Background(), actorKey{}, a)
		if !a.killed {
			a.run(ctx)
		}
		s.back <- event{a: a, done: true}
	}()
}

// Yield parks the calling actor before step what until the scheduler picks
// it again. It returns errKilled, at once, for an actor that was killed,
// and nil for a goroutine that is no actor (set-up and checks).
func (s *Sched) Yield(ctx context.Context, what string) error {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil || unyielding(ctx) {
		return nil
	}
	if a.killed {
		return errKilled
	}
	s.back <- event{a: a, at: what}
	<-a.wake
	if a.killed {
		return errKilled
	}
	return nil
}

// Await parks the calling actor until cond holds (cond is evaluated by
// the scheduler, between steps, and must not yield). It reports false when
// the actor stopped waiting because every actor waited, and errKilled for
// a killed actor.
func (s *Sched) Await(ctx context.Context, what string, cond func() bool) (bool, error) {
	a, _ := ctx.Value(actorKey{}).(*actor)
	if a == nil {
		return cond(), nil
	}
	if a.killed {
		return false, errKilled
	}
	a.cond, a.gaveUp = cond, false
	s.back <- event{a: a, at: "await " + what}
	<-a.wake
	if a.killed {
		return false, errKilled
	}
	return !a.gaveUp, nil
}

// unyieldingKey is the context key of a flag that, once set, makes every
// yield of the context's calls pass at once: a draw's close sets it when
// its settlement starts, whose goroutines (capture and release workers,
// the payer of orders) would otherwise yield for one actor at once.
type unyieldingKey struct{}

// unyielding reports whether ctx's yields pass (unyieldingKey set).
func unyielding(ctx context.Context) bool {
	f, _ := ctx.Value(unyieldingKey{}).(*atomic.Bool)
	return f != nil && f.Load()
}

// Killed reports whether ctx's actor was killed.
func Killed(ctx context.Context) bool {
	a, _ := ctx.Value(actorKey{}).(*actor)
	return a != nil && a.killed
}

// Run runs the schedule until every actor finished. It returns an error
// when an actor did not reach its next yield point within stuckAfter.
func (s *Sched) Run() error {
	for {
		a := s.pick()
		if a == nil {
			return nil
		}
		dual := strings.HasPrefix(a.prev, "redis eval") && strings.HasPrefix(a.at, "db ")
		if s.killAt >= 0 && s.steps >= s.killAt && a.at != "start" && s.onKill != nil && (dual || !s.killDual) {
			s.killAt, a.killed = -1, true
			s.trace = append(s.trace, fmt.Sprintf("%4d %-14s KILLED before %s", s.steps, a.name, a.at))
			s.onKill(a)
		} else {
			s.trace = append(s.trace, fmt.Sprintf("%4d %-14s %s", s.steps, a.name, a.at))
		}
		s.steps++
		a.wake <- struct{}{}
		timer := time.NewTimer(stuckAfter)
		select {
		case ev := <-s.back:
			timer.Stop()
			if ev.a != a {
				return fmt.Errorf("harness: %s moved while %s ran", ev.a.name, a.name)
			}
			ran := a.at
			a.prev, a.at, a.done = ran, ev.at, ev.done
			for _, b := range s.actors {
				b.hold = max(b.hold-1, 0)
			}
			if strings.HasPrefix(ran, "redis eval") && s.rng.IntN(2) == 0 {
				a.hold = 4 + s.rng.IntN(24)
			}
			if s.after != nil {
				s.after(a, ran)
			}
		case <-timer.C:
			return fmt.Errorf("stuck: %s did not reach a yield point within %v after %q", a.name, stuckAfter, a.at)
		}
	}
}

// pick chooses the next actor to move, nil when all are done.
func (s *Sched) pick() *actor {
	var live, ready []*actor
	for _, a := range s.actors {
		if a.done {
			continue
		}
		live = append(live, a)
		if a.cond == nil || a.cond() {
			ready = append(ready, a)
		}
	}
	if len(live) == 0 {
		return nil
	}
	if len(ready) == 0 {
		// Every actor awaits something that no one will do: one stops
		// waiting.
		a := live[s.rng.IntN(len(live))]
		a.cond, a.gaveUp = nil, true
		return a
	}
	var free []*actor
	for _, a := range ready {
		if a.hold == 0 {
			free = append(free, a)
		}
	}
	if len(free) > 0 {
		ready = free
	}
	a := s.choose(ready)
	a.cond = nil
	return a
}

// choose picks one of the ready actors: the first past maxSteps, else as
// the schedule's strategy says.
func (s *Sched) choose(ready []*actor) *actor {
	if s.steps >= maxSteps {
		return ready[0]
	}
	if !s.pct {
		return ready[s.rng.IntN(len(ready))]
	}
	best := highest(ready)
	for _, c := range s.change {
		if c == s.steps {
			s.low--
			best.prio = s.low
			best = highest(ready)
			break
		}
	}
	return best
}

// highest is the actor of live with the highest priority.
func highest(live []*actor) *actor {
	best := live[0]
	for _, a := range live[1:] {
		if a.prio > best.prio {
			best = a
		}
	}
	return best
}

// Trace is the schedule as it ran: one line per step, the actor and the
// step it took.
func (s *Sched) Trace() string { return strings.Join(s.trace, "\n") }
