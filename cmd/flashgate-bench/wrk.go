package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// wrkRun is what one wrk run measured.
type wrkRun struct {
	Rate     float64 // requests per second
	Requests int64
	P50, P99 time.Duration
	Non2xx   int64
	SockErrs string  // "" when none
	WrkCPU   float64 // cores wrk used on average
	SrvCPU   float64 // cores the server used on average
}

var (
	reRate     = regexp.MustCompile(`(?m)^Requests/sec:\s+([\d.]+)`)
	reRequests = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([\d.]+)(us|ms|s|m)`)
	reNon2xx   = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses:\s+(\d+)`)
	reSock     = regexp.MustCompile(`(?m)^\s*Socket errors:\s+(.*)$`)
	rePct      = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.000)?%\s+([\d.]+)(us|ms|s|m)\s*$`)
)

func parseDur(v, unit string) time.Duration {
	f, _ := strconv.ParseFloat(v, 64)
	switch unit {
	case "us":
		return time.Duration(f * float64(time.Microsecond))
	case "ms":
		return time.Duration(f * float64(time.Millisecond))
	case "m":
		return time.Duration(f * float64(time.Minute))
	}
	return time.Duration(f * float64(time.Second))
}

// parseWrk reads wrk's report.
func parseWrk(out string) (wrkRun, error) {
	var w wrkRun
	m := reRate.FindStringSubmatch(out)
	if m == nil {
		return w, fmt.Errorf("wrk printed no rate: %s", strings.TrimSpace(out))
	}
	w.Rate, _ = strconv.ParseFloat(m[1], 64)
	if m = reRequests.FindStringSubmatch(out); m != nil {
		w.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m = reNon2xx.FindStringSubmatch(out); m != nil {
		w.Non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m = reSock.FindStringSubmatch(out); m != nil {
		w.SockErrs = strings.TrimSpace(m[1])
	}
	for _, m := range rePct.FindAllStringSubmatch(out, -1) {
		d := parseDur(m[2], m[3])
		if m[1] == "50" {
			w.P50 = d
		} else {
			w.P99 = d
		}
	}
	return w, nil
}

// wrkSpec is one wrk command line.
type wrkSpec struct {
	Threads, Conns int
	URL            string
	Headers        []string // "Name: value"
	Script         string   // path of a Lua script, or ""
	ScriptArgs     []string
}

// runWrk runs wrk against a server and measures the CPU both used.
func (b *bench) runWrk(ctx context.Context, srvPID int, s wrkSpec) (wrkRun, error) {
	args := []string{"wrk", "-t" + strconv.Itoa(s.Threads), "-c" + strconv.Itoa(s.Conns),
		"-d" + fmtSeconds(b.cfg.Duration), "--latency"}
	for _, h := range s.Headers {
		args = append(args, "-H", h)
	}
	if s.Script != "" {
		args = append(args, "-s", s.Script)
	}
	args = append(args, s.URL)
	if len(s.ScriptArgs) > 0 {
		args = append(append(args, "--"), s.ScriptArgs...)
	}
	c0, t0 := cpuSeconds(srvPID), time.Now()
	out, st, err := b.r.output(ctx, b.cfg.Duration+2*time.Minute, nil, args...)
	wall := time.Since(t0).Seconds()
	srv := cpuSeconds(srvPID) - c0
	if err != nil {
		return wrkRun{}, err
	}
	w, err := parseWrk(out)
	if err != nil {
		return w, err
	}
	if st != nil && wall > 0 {
		// wrk's own CPU includes reading and formatting the token file in
		// init; the server's share is over the same wall time.
		w.WrkCPU = (st.UserTime() + st.SystemTime()).Seconds() / wall
		w.SrvCPU = srv / wall
	}
	return w, nil
}

func fmtSeconds(d time.Duration) string {
	s := int(d.Round(time.Second) / time.Second)
	if s < 1 {
		s = 1
	}
	return strconv.Itoa(s) + "s"
}

// rawRequest builds the bytes wrk sends for a request (wrk's Host header
// first, then the given headers).
func rawRequest(method, addr, path string, headers []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "%s %s HTTP/1.1\r\nHost: %s\r\n", method, path, addr)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return b.Bytes()
}

// rawRequestBody is rawRequest with a body (and its Content-Length).
func rawRequestBody(method, addr, path string, headers []string, body string) []byte {
	req := rawRequest(method, addr, path, append(append([]string(nil), headers...), "Content-Length: "+strconv.Itoa(len(body))))
	return append(req, body...)
}

// exchange sends one raw request and returns the raw response and its status.
func exchange(addr string, req []byte) ([]byte, int, error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(req); err != nil {
		return nil, 0, err
	}
	var raw bytes.Buffer
	resp, err := http.ReadResponse(bufio.NewReader(io.TeeReader(c, &raw)), nil)
	if err != nil {
		return nil, 0, err
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return nil, 0, err
	}
	resp.Body.Close()
	return raw.Bytes(), resp.StatusCode, nil
}

// capture saves flashgate's raw answer to a request as a file for the bare
// server, and returns the file's name and the answer's size.
func (b *bench) capture(name, addr, method, path string, headers []string, want int) (string, int, error) {
	raw, status, err := exchange(addr, rawRequest(method, addr, path, headers))
	if err != nil {
		return "", 0, fmt.Errorf("capturing %s: %w", name, err)
	}
	if status != want {
		return "", 0, fmt.Errorf("capturing %s: status %d, want %d: %.300s", name, status, want, raw)
	}
	file := b.path(name + ".http")
	return file, len(raw), os.WriteFile(file, raw, 0o644)
}

// pairResult is one scenario: ROUNDS alternating runs of the bare server
// and flashgate under the same wrk command.
type pairResult struct {
	Key, Label string
	Threads    int
	Conns      int
	Bare, Gate []wrkRun
	Notes      []string
	Err        error
}

// stat is the median, minimum and maximum of some figures.
type stat struct{ Med, Min, Max float64 }

func statOf(v []float64) stat {
	if len(v) == 0 {
		return stat{}
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stat{m, s[0], s[len(s)-1]}
}

func rates(rs []wrkRun) []float64 {
	var v []float64
	for _, r := range rs {
		v = append(v, r.Rate)
	}
	return v
}

// ratios are flashgate's rate over the bare server's, round by round.
func (p *pairResult) ratios() []float64 {
	var v []float64
	for i := range p.Gate {
		if i < len(p.Bare) && p.Bare[i].Rate > 0 {
			v = append(v, p.Gate[i].Rate/p.Bare[i].Rate)
		}
	}
	return v
}

func durStat(rs []wrkRun, f func(wrkRun) time.Duration) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, float64(f(r)))
	}
	return statOf(v)
}

func cpuStat(rs []wrkRun, f func(wrkRun) float64) stat {
	var v []float64
	for _, r := range rs {
		v = append(v, f(r))
	}
	return statOf(v)
}
