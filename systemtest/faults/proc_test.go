//go:build faults

package faults

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flashgate/flashgate/internal/testenv/procgroup"
)

// proc is one server process of the deployment, restartable: each start
// is a new procgroup.Proc (its own process group, so that kill -9, SIGSTOP
// and SIGCONT reach it and every child it has: PostgreSQL's backends),
// appending to the same log.
type proc struct {
	name  string
	bin   string
	args  []string
	env   []string
	log   string              // file the output is appended to
	cred  *syscall.Credential // run as this user (PostgreSQL refuses root)
	ready func(ctx context.Context) error

	mu     sync.Mutex
	cur    *procgroup.Proc // the latest run; nil before the first start
	killed time.Time       // when kill9 last killed it (guarded by mu)
}

// start starts the process and waits (at most limit) until ready answers.
func (p *proc) start(limit time.Duration) error {
	// Only the settings given here: a FLASHGATE_* variable of the caller's
	// shell would silently change a tier's flags.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLASHGATE_") {
			env = append(env, kv)
		}
	}
	env = append(env, p.env...)
	cur, err := procgroup.Start(procgroup.Spec{
		Name: p.name, Args: append([]string{p.bin}, p.args...), Env: env, Log: p.log, Cred: p.cred,
	})
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.cur = cur
	p.mu.Unlock()
	if p.ready == nil {
		return nil
	}
	return cur.WaitReady(context.Background(), limit, p.ready)
}

func (p *proc) running() *procgroup.Proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cur
}

// signal sends sig to the process group.
func (p *proc) signal(sig syscall.Signal) error {
	cur := p.running()
	if cur == nil {
		return fmt.Errorf("%s never started", p.name)
	}
	return cur.Signal(sig)
}

// kill9 kills the process group with SIGKILL and waits until it is gone.
func (p *proc) kill9() error {
	cur := p.running()
	if cur == nil {
		return nil
	}
	err := cur.Kill()
	p.mu.Lock()
	p.killed = time.Now()
	p.mu.Unlock()
	return err
}

// killedAt is when kill9 last killed the process (zero if never).
func (p *proc) killedAt() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.killed
}

// stop asks the process to end with sig, and kills it after limit.
func (p *proc) stop(sig syscall.Signal, limit time.Duration) error {
	cur := p.running()
	if cur == nil {
		return nil
	}
	return cur.Stop(sig, limit)
}

// pid is the running process's id (0 before start).
func (p *proc) pid() int {
	cur := p.running()
	if cur == nil {
		return 0
	}
	return cur.Pid()
}

var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

var errNotReady = errors.New("not ready")
