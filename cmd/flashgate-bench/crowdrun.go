package main

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// tokens writes n buyer tokens for users prefix0…prefix(n-1) to a file.
func (b *bench) tokens(ctx context.Context, prefix string, n int) (string, error) {
	file := b.path("tokens-" + strings.TrimSuffix(prefix, "-") + ".txt")
	out, _, err := b.r.output(ctx, 5*time.Minute, nil, b.flashbin, "token", "--user-prefix", prefix, "--count", strconv.Itoa(n))
	if err != nil {
		return "", err
	}
	return file, os.WriteFile(file, []byte(out), 0o600)
}

func (b *bench) token(ctx context.Context, user string) (string, error) {
	out, _, err := b.r.output(ctx, time.Minute, nil, b.flashbin, "token", "--user", user)
	tok := strings.TrimSpace(out)
	if tok != "" {
		b.r.alias(tok, "$TOKEN_"+strings.ToUpper(user))
	}
	return tok, err
}

// crowdRun is what one `flashgate crowd` printed.
type crowdRun struct {
	Requests           int
	Elapsed            time.Duration
	Rate               float64
	Answers            map[string]int
	P50, P99, P999, Mx time.Duration
	CreatedP99         time.Duration // the 201s' p99, when not every answer was one
	Check              string        // the cross-check's last line, if any
	ServerCPU          float64       // cores the server process used while the crowd ran (after minting its tokens)
}

var (
	reCrowdReq  = regexp.MustCompile(`(?m)^requests\s+(\d+) in (\S+)`)
	reCrowdAns  = regexp.MustCompile(`(?m)^  ([0-9][0-9][0-9][ a-z_]*|transport error)\s+(\d+)\s*$`)
	reCrowdRate = regexp.MustCompile(`(?m)^throughput\s+([\d.]+)`)
	reCrowdLat  = regexp.MustCompile(`(?m)^latency\s+p50 (\S+)\s+p99 (\S+)\s+p999 (\S+)\s+max (\S+)`)
	reCrowdMade = regexp.MustCompile(`(?m)^  of the 201s p50 (\S+)\s+p99 (\S+)`)
	reCrowdChk  = regexp.MustCompile(`(?m)^cross-check\s+(.*)$`)
)

func parseCrowd(out string) (crowdRun, error) {
	c := crowdRun{Answers: map[string]int{}}
	m := reCrowdReq.FindStringSubmatch(out)
	if m == nil {
		return c, fmt.Errorf("crowd printed no request count: %.500s", out)
	}
	c.Requests, _ = strconv.Atoi(m[1])
	c.Elapsed, _ = time.ParseDuration(m[2])
	for _, m := range reCrowdAns.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[2])
		c.Answers[strings.TrimSpace(m[1])] = n
	}
	if m = reCrowdRate.FindStringSubmatch(out); m != nil {
		c.Rate, _ = strconv.ParseFloat(m[1], 64)
	} else if c.Elapsed > 0 {
		c.Rate = float64(c.Requests) / c.Elapsed.Seconds()
	}
	if m = reCrowdLat.FindStringSubmatch(out); m != nil {
		c.P50, _ = time.ParseDuration(m[1])
		c.P99, _ = time.ParseDuration(m[2])
		c.P999, _ = time.ParseDuration(m[3])
		c.Mx, _ = time.ParseDuration(m[4])
	}
	if m = reCrowdMade.FindStringSubmatch(out); m != nil {
		c.CreatedP99, _ = time.ParseDuration(m[2])
	}
	if ms := reCrowdChk.FindAllStringSubmatch(out, -1); len(ms) > 0 {
		c.Check = strings.TrimSpace(ms[len(ms)-1][1])
	}
	return c, nil
}

// answers formats the answer counts, most frequent first.
func (c crowdRun) answers() string {
	type kv struct {
		k string
		n int
	}
	var l []kv
	for k, n := range c.Answers {
		l = append(l, kv{k, n})
	}
	sort.Slice(l, func(i, j int) bool { return l[i].n > l[j].n || l[i].n == l[j].n && l[i].k < l[j].k })
	var parts []string
	for _, e := range l {
		parts = append(parts, fmt.Sprintf("%s: %d", e.k, e.n))
	}
	return strings.Join(parts, ", ")
}

// crowd runs `flashgate crowd` (the same tool against either server).
// rate > 0 makes it an open model at that arrival rate; adminStack, when not
// nil, adds the cross-check against the admin figures.
func (b *bench) crowd(ctx context.Context, target, sale string, users, conc int, rate float64, adminStack *stack) (crowdRun, error) {
	return b.crowdOn(ctx, 0, target, sale, users, conc, rate, adminStack)
}

// crowdOn is crowd that also measures the CPU of the server process srvPID.
func (b *bench) crowdOn(ctx context.Context, srvPID int, target, sale string, users, conc int, rate float64, adminStack *stack) (crowdRun, error) {
	args := []string{b.flashbin, "crowd", "--target", "http://" + target, "--sale", sale,
		"--users", strconv.Itoa(users), "--concurrency", strconv.Itoa(conc), "--progress=false"}
	if rate > 0 {
		args = append(args, "--rate", strconv.FormatFloat(rate, 'f', 0, 64))
	}
	if adminStack != nil {
		args = append(args, "--admin", "http://"+adminStack.admin)
	}
	limit := 5*time.Minute + time.Duration(users/500)*time.Second
	cpu0 := cpuSeconds(srvPID)
	out, _, err := b.r.output(ctx, limit, nil, args...)
	c, perr := parseCrowd(out)
	if srvPID > 0 && c.Elapsed > 0 {
		// The server idles while the crowd mints its tokens, so its CPU
		// over the crowd's own clock is a fair share.
		c.ServerCPU = (cpuSeconds(srvPID) - cpu0) / c.Elapsed.Seconds()
	}
	if err != nil {
		if perr == nil {
			return c, fmt.Errorf("%w (%s)", err, c.answers())
		}
		return c, err
	}
	return c, perr
}
