package failover

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/salestatus"
	"github.com/flashgate/flashgate/lua"
)

// PauseStatus reads whether an open sale is paused (start = 0 with resume
// set; for a bucketed sale, in one of its buckets, as the watch saw it)
// and why, for GET /admin/sales/{id} (salestatus.Reader.Paused).
func (s *Watcher) PauseStatus(ctx context.Context, sale flashgate.Sale) (*salestatus.PauseStatus, error) {
	if sale.State != flashgate.StateOpen {
		return nil, nil
	}
	note, noted := s.PausedSale(sale.ID)
	resume := 0
	if !sale.Bucketed() {
		v, err := s.rdb.HMGet(ctx, lua.SaleKey(sale.ID), lua.FieldStart, lua.FieldResume).Result()
		if err != nil {
			return nil, fmt.Errorf("reading the sale's state: %w: %w", flashgate.ErrUnavailable, err)
		}
		start, _ := v[0].(string)
		r, _ := v[1].(string)
		if resume, _ = strconv.Atoi(r); start == "1" || resume < 1 {
			return nil, nil // selling: a note from the last tick is stale
		}
	}
	if !noted && resume == 0 {
		return nil, nil
	}
	p := &salestatus.PauseStatus{Reason: note.Reason}
	if noted {
		since := note.Since.UTC()
		p.Since, p.Seconds = &since, max(time.Since(since).Seconds(), 0)
	}
	if p.Reason == "" {
		p.Reason = "paused until rebuilt from the database after a failover (the leading control plane's failover watch owns it)"
		if resume == 1 {
			p.Reason = "rebuilt from the database: reopens at the leading control plane's next tick"
		}
	}
	return p, nil
}
