package replwait

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/flashgate/flashgate/internal/testenv/redistest"
)

// TestMain fails the package's tests if any goroutine outlives them.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWantReadsOncePerEvery: concurrent writes that find the count old
// read it once, and wait for that read; Reread reads at once.
func TestWantReadsOncePerEvery(t *testing.T) {
	var c Count
	reads := 0
	read := func(c *Count) { reads++; c.Store(2) }
	var wg sync.WaitGroup
	got := make([]int, 8)
	for i := range got {
		wg.Go(func() { got[i] = c.Want(read) })
	}
	wg.Wait()
	for i, n := range got {
		if n != 2 {
			t.Errorf("write %d: got %d replicas, want 2", i, n)
		}
	}
	if reads != 1 {
		t.Errorf("got %d reads, want 1", reads)
	}
	if n := c.Reread(func(c *Count) { reads++; c.Store(1) }); n != 1 || reads != 2 {
		t.Errorf("Reread: got %d replicas after %d reads, want 1 after 2", n, reads)
	}
	var cs Counts
	if cs.Of("a") != cs.Of("a") || cs.Of("a") == cs.Of("b") {
		t.Error("Of: want one Count per address")
	}
}

// TestRead: a primary on its own has 0 online replicas and can tell.
func TestRead(t *testing.T) {
	rdb := redistest.Start(t).Client(t)
	n, a, err := Read(context.Background(), rdb)
	if n != 0 || a != Counted || err != nil {
		t.Errorf("Read: got %d, %v, %v; want 0, counted, nil", n, a, err)
	}
}

// replyError is an error reply of Redis, as go-redis returns it.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestParseAndNote: only a primary that says role:master gives a count;
// a server that can never tell counts none; any other answer (an error
// reply, a replica, a read that failed) keeps the last count and at least
// one replica, never none.
func TestParseAndNote(t *testing.T) {
	master := "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=1,state=online,offset=1,lag=0\r\n" +
		"slave1:ip=127.0.0.1,port=2,state=online,offset=1,lag=0\r\n"
	slave := "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nconnected_slaves:0\r\n"
	for _, c := range []struct {
		name     string
		info     string
		err      error
		last     int
		wantN    int
		wantA    Answer
		wantKept int
	}{
		{"a primary with two online", master, nil, 0, 2, Counted, 2},
		{"a primary with none", "role:master\r\nconnected_slaves:0\r\n", nil, 3, 0, Counted, 0},
		{"a node that says role:slave", slave, nil, 0, 0, Unreadable, 1},
		{"role:slave after a count of 2", slave, nil, 2, 0, Unreadable, 2},
		{"BUSY", "", replyError("BUSY Redis is busy running a script"), 0, 0, Unreadable, 1},
		{"max clients", "", replyError("ERR max number of clients reached"), 0, 0, Unreadable, 1},
		{"LOADING", "", replyError("LOADING Redis is loading the dataset in memory"), 2, 0, Unreadable, 2},
		{"NOPERM", "", replyError("NOPERM User u has no permissions to run the 'info' command"), 0, 0, Unreadable, 1},
		{"a read that failed", "", errors.New("read tcp: i/o timeout"), 0, 0, Unreadable, 1},
		{"INFO renamed", "", replyError("ERR unknown command 'INFO', with args beginning with: 'replication'"), 2, 0, Blind, 0},
		{"miniredis", "", replyError("section (replication) is not supported"), 0, 0, Blind, 0},
		{"no replication section", "# Server\r\nredis_version:7.0.0\r\n", nil, 0, 0, Blind, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, a := Parse(c.info, c.err)
			if n != c.wantN || a != c.wantA {
				t.Errorf("Parse: got %d, %v; want %d, %v", n, a, c.wantN, c.wantA)
			}
			var cnt Count
			cnt.Store(c.last)
			if was, now := cnt.Note(n, a); was != c.last || now != c.wantKept || cnt.Online() != c.wantKept {
				t.Errorf("Note: got was %d, now %d, online %d; want %d, %d, %d", was, now, cnt.Online(), c.last, c.wantKept, c.wantKept)
			}
		})
	}
}
