package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// CommandStat is one command's line of INFO commandstats.
type CommandStat struct {
	Calls int64 // calls since the start or the last CONFIG RESETSTAT
	Usec  int64 // microseconds they took; a script's time includes its commands'
}

// CommandStats parses the text of INFO commandstats into the figures of
// each command, by its name as Redis writes it after "cmdstat_" ("evalsha",
// "xadd", "client|list").
func CommandStats(info string) map[string]CommandStat {
	out := map[string]CommandStat{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[name] = st
	}
	return out
}

// CPUSeconds returns used_cpu_user + used_cpu_sys from the text of INFO cpu
// (or of an INFO that includes it): the seconds of CPU the server has used.
func CPUSeconds(info string) float64 {
	var sum float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, _ := strconv.ParseFloat(v, 64)
			sum += f
		}
	}
	return sum
}

// Commands reads INFO commandstats from c (a server, not a cluster) and
// parses it with CommandStats; a failed read fails tb.
func Commands(tb testing.TB, c *redis.Client) map[string]CommandStat {
	tb.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		tb.Fatalf("INFO commandstats on %s: %v", c.Options().Addr, err)
	}
	return CommandStats(info)
}
