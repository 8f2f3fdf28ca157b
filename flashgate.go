// Package flashgate holds the nouns every tier shares: sales, orders, the clock
// and the error vocabulary. It imports only the standard library; the tiers
// (gateway, inventory, ordersink, controlplane) never import each other, and
// only cmd/flashgate wires them together.
package flashgate

import "time"

// SaleState is the public state of a sale, as the gateway reports it.
type SaleState string

// The states a sale moves through.
const (
	StateUpcoming SaleState = "upcoming"
	StateOpen     SaleState = "open"
	StateSoldOut  SaleState = "sold_out"
	StateClosed   SaleState = "closed"
)

// DefaultAdmitRatio is how much more traffic than stock the gateway admits.
const DefaultAdmitRatio = 1.5

// Sale is an item on sale: Total units, sold at PriceCents each, from StartsAt.
type Sale struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	PriceCents int64      `json:"price_cents"`
	Total      int64      `json:"total"`
	StartsAt   *time.Time `json:"starts_at"`
	EndsAt     *time.Time `json:"ends_at"`
	// AdmitRatio scales Total into the gateway's admission cap; 0 means
	// DefaultAdmitRatio.
	AdmitRatio float64 `json:"admit_ratio,omitempty"`
	// PerUser is the most units one user may hold in the sale; 0 means 1.
	PerUser int64 `json:"per_user,omitempty"`
	// State is the stored lifecycle state: upcoming, open or closed.
	// (sold_out is derived from live figures, never stored.)
	State SaleState `json:"state"`
	// Buckets splits the sale's stock over this many buckets, each a Redis
	// hash tag of its own (MaxBuckets at most); 0 and 1 mean one, today's
	// layout. Fixed when the sale is created.
	Buckets int `json:"buckets,omitempty"`
	// BucketSalts are the salts of the buckets' hash tags, chosen when the
	// sale is created so that the buckets fall on different Redis
	// primaries; empty for an unbucketed sale.
	BucketSalts []int `json:"bucket_salts,omitempty"`
	// Archived is set once the sale ended and settled (closed, every order
	// stored, none left unpaid): the control plane's periodic passes leave
	// it out. Reopening the sale clears it.
	Archived bool `json:"archived,omitempty"`

	// Queue is "fair" for a sale sold through a fair queue (package fairqueue),
	// "draw" for one sold by a draw (QueueDraw, drawentry.go); "" (the
	// default) sells first come, first served.
	Queue string `json:"queue,omitempty"`
	// EntriesOpenAt and EntriesCloseAt are a draw sale's entry window:
	// entries are taken from the first until the second (both required for
	// a draw, nil otherwise).
	EntriesOpenAt  *time.Time `json:"entries_open_at,omitempty"`
	EntriesCloseAt *time.Time `json:"entries_close_at,omitempty"`
	// PrequeueSeconds is how long before StartsAt a fair queue opens;
	// 0 means fairqueue.DefaultPrequeueSeconds.
	PrequeueSeconds int `json:"prequeue_seconds,omitempty"`
	// ChallengeMaxNumber is the proof-of-work's difficulty (the largest
	// secret number of a challenge); 0 means no proof of work.
	ChallengeMaxNumber int64 `json:"challenge_maxnumber,omitempty"`
	// ChallengeAuto lets the difficulty rise with the queue's growth
	// rate; nil means true.
	ChallengeAuto *bool `json:"challenge_auto,omitempty"`
	// AdmitPerMinute caps the positions admitted per minute; 0 means no
	// cap beyond the stock.
	AdmitPerMinute int64 `json:"admit_per_minute,omitempty"`
	// AdmitSeconds is how long an admitted buyer may buy before the slot
	// passes on; 0 means fairqueue.DefaultAdmitSeconds.
	AdmitSeconds int `json:"admit_seconds,omitempty"`

	// Currency is the ISO 4217 code (lower case) its payments are taken
	// in; "" means the deployment's (--payment-currency, default usd).
	Currency string `json:"currency,omitempty"`

	// Variants are the sale's stocks when it comes in several (sizes,
	// sections, editions): 1..MaxVariants of them, ids unique, and Total
	// is the sum of their totals. PerUser and the one live order per
	// (sale, user) count across all of them. Empty means one stock, Total.
	Variants []Variant `json:"variants,omitempty"`
}

// Variant is one stock of a sale sold in several: its own total, under the
// sale's one limit per buyer.
type Variant struct {
	// ID names the variant in purchases and answers (ValidVariantID).
	ID string `json:"id"`
	// Name is what the item page shows (1–200 characters).
	Name string `json:"name"`
	// Total is the variant's units, at least 1.
	Total int64 `json:"total"`
}

// MaxVariants is the most variants one sale may have.
const MaxVariants = 100

// MaxVariantIDLen is the longest variant id.
const MaxVariantIDLen = 16

// ValidVariantID reports whether id is 1–16 characters of [A-Za-z0-9_-]:
// short and URL-safe, as it travels in requests, Redis fields and rows.
func ValidVariantID[T ~string | ~[]byte](id T) bool {
	return len(id) <= MaxVariantIDLen && ValidID(id)
}

// HasVariants reports whether the sale is sold in several variants.
func (s Sale) HasVariants() bool { return len(s.Variants) > 0 }

// Variant returns the sale's variant with the given id.
func (s Sale) Variant(id string) (Variant, bool) {
	for _, v := range s.Variants {
		if v.ID == id {
			return v, true
		}
	}
	return Variant{}, false
}

// MaxBuckets is the most buckets one sale may be split into.
const MaxBuckets = 64

// Bucketed reports whether the sale's stock is split over buckets.
func (s Sale) Bucketed() bool { return s.Buckets > 1 }

// AdmitCap is the admission cap for total units at ratio r (0 = default).
func AdmitCap(total int64, r float64) int64 {
	if r <= 0 {
		r = DefaultAdmitRatio
	}
	c := int64(float64(total) * r)
	if c < total {
		c = total
	}
	return c
}

// ValidSaleID reports whether id is 1–64 characters of [A-Za-z0-9_-].
func ValidSaleID(id string) bool { return ValidID(id) }

// ValidOrderID reports whether id has the shape of an order id (the same
// alphabet as sale ids).
func ValidOrderID(id string) bool { return ValidID(id) }

// ValidID is the one id rule, for strings and for request bytes alike (the
// gateway checks path bytes without allocating).
func ValidID[T ~string | ~[]byte](id T) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// OrderStatus is where an order stands.
type OrderStatus string

// The statuses of docs/api.md. Reserved is the only one that lives in Redis alone.
const (
	StatusReserved       OrderStatus = "reserved"
	StatusPendingPayment OrderStatus = "pending_payment"
	StatusPaid           OrderStatus = "paid"
	StatusCancelled      OrderStatus = "cancelled"
	StatusExpired        OrderStatus = "expired"
	StatusRefunded       OrderStatus = "refunded"
	// StatusPaying is a pending_payment order with a payment in flight at
	// the provider: an answer of the order routes, never a row's status.
	StatusPaying OrderStatus = "paying"
)

// Live reports whether an order in status s holds its units.
func (s OrderStatus) Live() bool {
	return s == StatusReserved || s == StatusPendingPayment || s == StatusPaid
}

// Order is one reservation of Quantity units of a sale by a user.
type Order struct {
	ID         string      `json:"order_id"`
	SaleID     string      `json:"sale_id"`
	UserID     string      `json:"user_id"`
	Quantity   int64       `json:"quantity"`
	PriceCents int64       `json:"price_cents"`
	Status     OrderStatus `json:"status"`
	// Bucket is the index of the bucket the order's units came from, in a
	// bucketed sale (always 0 in an unbucketed one).
	Bucket int `json:"bucket,omitempty"`
	// Variant is the id of the variant the order's units came from, in a
	// sale with variants ("" in one without).
	Variant   string    `json:"variant,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// PaymentIntent and ClientSecret name the order's payment at the
	// provider (empty with simulated payments): what the item page needs
	// to collect it.
	PaymentIntent string `json:"payment_intent,omitempty"`
	ClientSecret  string `json:"client_secret,omitempty"`
}

// Payment is an order's payment at the provider as the database keeps it.
type Payment struct {
	OrderID  string `json:"order_id"`
	IntentID string `json:"payment_intent"`
	// Status is the intent's last known status (requires_payment_method,
	// processing, succeeded, canceled, ...).
	Status string `json:"status"`
	// Outcome is what flashgate made of a success: "" (none yet), "paid",
	// "honoured_late" (succeeded after the order expired, a unit taken
	// again), "refunded_late" (no unit left: refunded) or "refunded" (an
	// admin refund); "late_pending", "refunding_late" and "refunding" are
	// steps under way (controlplane/orders).
	Outcome     string    `json:"outcome,omitempty"`
	AmountCents int64     `json:"amount_cents"`
	Currency    string    `json:"currency"`
	RefundID    string    `json:"refund_id,omitempty"`
	Refunded    bool      `json:"refunded,omitempty"`
	Disputed    bool      `json:"disputed,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	// Checks counts the reconciliation's looks at the payment so far
	// (its backoff); set by the store's list of due payments only.
	Checks int `json:"-"`
}

// SecondCharge is an intent whose metadata names an order whose payment is
// another intent (made outside the checkout, in the provider's dashboard
// for example): a second charge of the order, never honoured. The
// reconciliation cancels it while it can, refunds it once it succeeded,
// and records what it did, so that each is dealt with once.
type SecondCharge struct {
	IntentID string
	OrderID  string
	// Status is the intent's last known status.
	Status string
	// Outcome is "" (open: looked at again until it succeeds or is
	// canceled), "refunding" (the refund is under way), "refunded" or
	// "canceled" (nothing was taken).
	Outcome     string
	AmountCents int64
	Currency    string
	RefundID    string
	CreatedAt   time.Time
	UpdatedAt   time.Time
	// Checks counts the reconciliation's looks at it so far (its
	// backoff); set by the store's list of due ones only.
	Checks int
}

// InFlight reports whether p still holds its order's units against the
// expiry: not settled and not canceled (a succeeded intent not yet
// applied holds them too).
func (p Payment) InFlight() bool {
	return p.Outcome == "" && p.Status != IntentCanceled
}

// Clock tells the time; tests pass their own.
type Clock interface {
	Now() time.Time
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// SaleFigures are a sale's order counts as the database holds them.
type SaleFigures struct {
	Persisted      int64 `json:"persisted"` // order rows, any status
	PendingPayment int64 `json:"pending_payment"`
	Paid           int64 `json:"paid"`
	Cancelled      int64 `json:"cancelled"`
	Expired        int64 `json:"expired"`
	Refunded       int64 `json:"refunded"`
	// LiveUnits is the quantity held by pending_payment and paid rows.
	LiveUnits int64 `json:"-"`
	// PersistedUnits is the quantity of all rows, any status.
	PersistedUnits int64 `json:"-"`
}
