package flashgate

import "strings"

// OnlineReplicas counts the replicas in state online in the text of a
// primary's INFO replication ("slave0:ip=…,port=…,state=online,offset=…").
// It is what a --wait-replicas or --sink-wait-replicas of auto waits for.
func OnlineReplicas(info string) int {
	n := 0
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && strings.HasPrefix(k, "slave") && strings.Contains(v, "state=online") {
			n++
		}
	}
	return n
}

// KnowsReplicas reports whether info is the text of an INFO replication
// that tells a primary's replicas (miniredis, for one, answers nothing).
func KnowsReplicas(info string) bool { return strings.Contains(info, "connected_slaves:") }
