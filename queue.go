package flashgate

// QueueFair is Sale.Queue of a sale sold through a fair queue.
const QueueFair = "fair"

// Fair reports whether the sale is sold through a fair queue (whose rules
// are in package fairqueue).
func (s Sale) Fair() bool { return s.Queue == QueueFair }

// ChallengeAutoOn reports whether the proof-of-work's difficulty rises with
// the queue (the default).
func (s Sale) ChallengeAutoOn() bool { return s.ChallengeAuto == nil || *s.ChallengeAuto }

// QueueMark is what a fair queue's journal keeps of the queue itself: the
// epoch its seed derives from (with the sale id and the control plane's
// seed secret), the seed's SHA-256 published at the opening, the
// frontiers (positions admitted, positions whose window ended; both only
// grow) and the admission windows still open, one "<k> <ms> <theta>" a
// line, as Redis keeps them.
type QueueMark struct {
	Epoch, SeedSHA string
	K, E           int64
	Windows        string
}

// QueueEntrant is one journaled entrant of a fair queue: Entry is "p" for
// one who entered before the start, "l<n>" for the n-th after it.
type QueueEntrant struct {
	User, Entry string
}
