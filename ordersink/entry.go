package ordersink

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/lua"
)

// parseEntry turns the fields of an order entry (lua.ReadEntry, either
// form) into an order in status reserved, created at the entry's time,
// with the entry's variant (lua.EntryVariant) if it has one.
func parseEntry(sale string, v map[string]any) (flashgate.Order, error) {
	if len(v) == 0 {
		return flashgate.Order{}, errors.New("entry has no fields (deleted?)")
	}
	e, ok := lua.ReadEntry(v)
	if !ok {
		return flashgate.Order{}, fmt.Errorf("field %s: want six space-separated values", lua.EntryCompact)
	}
	num := func(k, s string) (int64, error) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("field %s: %q is not an integer", k, s)
		}
		return n, nil
	}
	// A bucket's stream (its member of fg:sales is the bucket's tag) holds
	// orders of the bucket's sale that carry the bucket's index.
	saleOf, bucket := lua.SaleOfTag(sale)
	o := flashgate.Order{ID: e.Order, SaleID: e.Sale, UserID: e.User, Status: flashgate.StatusReserved}
	if e.Compact {
		o.SaleID = saleOf
	}
	if bucket >= 0 {
		if e.Bucket != strconv.Itoa(bucket) {
			return o, fmt.Errorf("field %s: %q on the stream of bucket %q", lua.EntryBucket, e.Bucket, sale)
		}
		o.Bucket = bucket
	}
	switch {
	case !flashgate.ValidOrderID(o.ID):
		return o, fmt.Errorf("field %s: bad order id %q", lua.EntryOrder, o.ID)
	case o.SaleID != saleOf:
		return o, fmt.Errorf("field %s: %q on the stream of sale %q", lua.EntrySale, o.SaleID, sale)
	case o.UserID == "":
		return o, fmt.Errorf("field %s: empty", lua.EntryUser)
	}
	// A variant sale's entries name the variant (lua.EntryVariant); a sale
	// of one stock's, and entries older versions wrote, have none ('').
	if e.Variant != "" && !flashgate.ValidVariantID(e.Variant) {
		return o, fmt.Errorf("field %s: bad variant id %q", lua.EntryVariant, e.Variant)
	}
	o.Variant = e.Variant
	var err error
	if o.Quantity, err = num(lua.EntryQuantity, e.Quantity); err != nil {
		return o, err
	}
	if o.Quantity < 1 {
		return o, fmt.Errorf("field %s: %d below 1", lua.EntryQuantity, o.Quantity)
	}
	if o.PriceCents, err = num(lua.EntryPrice, e.Price); err != nil {
		return o, err
	}
	ms, err := num(lua.EntryTime, e.Time)
	if err != nil {
		return o, err
	}
	o.CreatedAt = time.UnixMilli(ms).UTC()
	o.UpdatedAt = o.CreatedAt
	return o, nil
}
