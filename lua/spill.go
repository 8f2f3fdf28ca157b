package lua

import (
	"strconv"
	"strings"
)

// The spill path of a bucketed sale: a buyer whose home bucket is sold out
// while another bucket still has units reserves there, in three scripts on
// possibly different primaries. Claim places a claim marker for the user in
// the home bucket's buyers hash (so the home still answers "already
// purchased" to a second attempt), Reserve with ARGV[7] = SpillArg takes
// the units in the spill bucket (whose buyers hash gets the user's order id
// as usual), and Finalize turns the claim into the final marker, which names
// the order and its bucket. Unmark clears a final marker when its order is
// released; the leader settles claims a crash left behind with SpillCheck
// (which fences the order in every other bucket) and then Finalize or
// Unclaim.

// SpillArg is Reserve's ARGV[7] for a spill reserve.
const SpillArg = "spill"

// ClaimMarker is the buyers-hash value of a pending claim of order.
func ClaimMarker(order string) string { return "~" + order }

// SpillMarker is the buyers-hash value that keeps a user whose order was
// reserved in bucket from buying again in their home bucket.
func SpillMarker(order string, bucket int) string {
	return "~" + order + "@" + strconv.Itoa(bucket)
}

// ParseMarker reads a buyers-hash value: ok is false for a plain order id;
// a claim has final false and bucket -1. Order ids never hold '~' or '@'
// (flashgate.ValidOrderID).
func ParseMarker(v string) (order string, bucket int, final, ok bool) {
	rest, isMarker := strings.CutPrefix(v, "~")
	if !isMarker {
		return "", -1, false, false
	}
	o, b, hasBucket := strings.Cut(rest, "@")
	if !hasBucket {
		return rest, -1, false, true
	}
	n, err := strconv.Atoi(b)
	if err != nil {
		return "", -1, false, false
	}
	return o, n, true, true
}
