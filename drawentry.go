package flashgate

import (
	"strconv"
	"time"
)

// QueueDraw is Sale.Queue of a sale sold by a draw: buyers enter during a
// window (EntriesOpenAt..EntriesCloseAt), their card held, and the units go
// to entrants chosen at the close. Nobody buys such a sale directly: its
// purchases answer ErrNotStarted; only the draw's own close path reserves.
const QueueDraw = "draw"

// Draw reports whether the sale is sold by a draw.
func (s Sale) Draw() bool { return s.Queue == QueueDraw }

// EntriesOpen reports whether a draw sale takes entries (and withdrawals)
// at now: from EntriesOpenAt, until (not at) EntriesCloseAt.
func (s Sale) EntriesOpen(now time.Time) bool {
	return s.Draw() && s.EntriesOpenAt != nil && s.EntriesCloseAt != nil &&
		!now.Before(*s.EntriesOpenAt) && now.Before(*s.EntriesCloseAt)
}

// ValidateDraw checks a sale's draw settings: a draw sale needs both ends
// of its entry window, the close after the open, ends_at (if any) after
// the close, and one bucket; a sale of
// another mode has no window. Errors are *FieldError naming the field.
func (s Sale) ValidateDraw() error {
	if !s.Draw() {
		switch {
		case s.EntriesOpenAt != nil:
			return &FieldError{Field: "entries_open_at", Reason: `an entry window needs "mode": "draw"`}
		case s.EntriesCloseAt != nil:
			return &FieldError{Field: "entries_close_at", Reason: `an entry window needs "mode": "draw"`}
		}
		return nil
	}
	switch {
	case s.EntriesOpenAt == nil:
		return &FieldError{Field: "entries_open_at", Reason: "a draw needs it"}
	case s.EntriesCloseAt == nil:
		return &FieldError{Field: "entries_close_at", Reason: "a draw needs it"}
	case !s.EntriesCloseAt.After(*s.EntriesOpenAt):
		return &FieldError{Field: "entries_close_at", Reason: "not after entries_open_at"}
	case s.EndsAt != nil && !s.EndsAt.After(*s.EntriesCloseAt):
		// The close makes the winners' orders, which a closed sale
		// refuses.
		return &FieldError{Field: "ends_at", Reason: "a draw's sale ends after its entries close"}
	case s.Bucketed():
		return &FieldError{Field: "buckets", Reason: "a draw sells from one bucket"}
	case s.PrequeueSeconds != 0 || s.ChallengeAuto != nil || s.AdmitPerMinute != 0 || s.AdmitSeconds != 0:
		return &FieldError{Field: "queue", Reason: "fair queue settings on a draw"}
	}
	return nil
}

// DrawEntryState is where a draw entry stands.
type DrawEntryState string

// The states of a draw entry. An entry is made pending and counts only once
// its card hold is authorised (entered); an entrant may withdraw it until
// the close. At the close an entered entry is won or lost; a won entry's
// hold is captured (its order made), a lost or withdrawn one's released.
const (
	DrawPending   DrawEntryState = "pending"   // the hold is not authorised yet
	DrawEntered   DrawEntryState = "entered"   // authorised: in the draw
	DrawWithdrawn DrawEntryState = "withdrawn" // withdrawn by the entrant before the close
	DrawWon       DrawEntryState = "won"       // chosen at the close, not captured yet
	DrawLost      DrawEntryState = "lost"      // not chosen
	DrawCaptured  DrawEntryState = "captured"  // won and charged: the order exists
	DrawReleased  DrawEntryState = "released"  // the hold was released (lost, withdrawn or failed)
)

// drawStates lists every DrawEntryState, for Valid.
var drawStates = [...]DrawEntryState{DrawPending, DrawEntered, DrawWithdrawn, DrawWon, DrawLost, DrawCaptured, DrawReleased}

// Valid reports whether st is one of the states above.
func (st DrawEntryState) Valid() bool {
	for _, s := range drawStates {
		if s == st {
			return true
		}
	}
	return false
}

// Live reports whether an entry in state st still takes part in the draw
// (pending or entered): one buyer holds at most one live entry per sale.
func (st DrawEntryState) Live() bool { return st == DrawPending || st == DrawEntered }

// Final reports whether st changes no more.
func (st DrawEntryState) Final() bool {
	return st == DrawCaptured || st == DrawReleased
}

// Rank is how far an entry in state st has gone: pending 0, entered 1,
// withdrawn, won and lost 2, captured and released 3 (-1 for no state).
// Every move of an entry goes to a higher rank, so a change of a lower
// rank than an entry's state is older than it, whatever its time says.
func (st DrawEntryState) Rank() int {
	switch st {
	case DrawPending:
		return 0
	case DrawEntered:
		return 1
	case DrawWithdrawn, DrawWon, DrawLost:
		return 2
	case DrawCaptured, DrawReleased:
		return 3
	}
	return -1
}

// DrawOrderID is the order a won entry becomes at the draw's close: one
// per entry ("o" and the entry id), so that a close run again finds the
// order it made, and the entrant's page can name it.
func DrawOrderID(entryID string) string { return "o" + entryID }

// DrawEntry is one buyer's entry in a draw sale: the variant wanted (on a
// sale with variants) and how many units, and where it stands.
type DrawEntry struct {
	// ID names the entry (ValidID): the per-drop list of entries names
	// entrants by it, never by user id.
	ID       string         `json:"entry_id"`
	SaleID   string         `json:"sale_id"`
	UserID   string         `json:"user_id"`
	Variant  string         `json:"variant,omitempty"`
	Quantity int64          `json:"quantity"`
	State    DrawEntryState `json:"state"`
	// PaymentIntent names the entry's card hold at the provider (empty
	// with simulated payments); ClientSecret is what the buyer's page
	// confirms it with, set only in the answer that hands it out (never
	// stored).
	PaymentIntent string `json:"payment_intent,omitempty"`
	ClientSecret  string `json:"client_secret,omitempty"`
	// OrderID is the order a won entry became, once made.
	OrderID   string    `json:"order_id,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// Seq orders the changes stamped in one millisecond of UpdatedAt: a
	// journaled change's stream sequence within its millisecond (0 for a
	// change not journaled), so that of two writers of the journal the
	// later change wins whichever writes last.
	Seq int64 `json:"-"`
}

// ValidateEntry checks an entry's wish against the draw sale s: a variant
// the sale sells (none on a sale of one stock) and a quantity in
// 1..per_user. A sale not sold by a draw is ErrNotFound; a bad wish is a
// *FieldError ("variant", "quantity").
func (s Sale) ValidateEntry(variant string, qty int64) error {
	if !s.Draw() {
		return ErrNotFound
	}
	if s.HasVariants() {
		if _, ok := s.Variant(variant); !ok {
			return &FieldError{Field: "variant", Reason: "not a variant of the sale"}
		}
	} else if variant != "" {
		return &FieldError{Field: "variant", Reason: "the sale has no variants"}
	}
	per := s.PerUser
	if per <= 0 {
		per = 1
	}
	if qty < 1 || qty > per {
		return &FieldError{Field: "quantity", Reason: "outside 1.." + strconv.FormatInt(per, 10)}
	}
	return nil
}
