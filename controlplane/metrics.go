package controlplane

import (
	"context"
	"time"

	"github.com/flashgate/flashgate"
	"github.com/flashgate/flashgate/controlplane/internal/salehash"
	"github.com/flashgate/flashgate/controlplane/opsmetrics"
	"github.com/flashgate/flashgate/controlplane/salestatus"
)

// metricsSource is the Service as the collectors of controlplane/opsmetrics
// read it.
type metricsSource struct{ s *Service }

var _ opsmetrics.Source = metricsSource{}

func (m metricsSource) Leading() bool { return m.s.Leading() }

func (m metricsSource) LiveSales(ctx context.Context) ([]flashgate.Sale, error) {
	return m.s.store.LiveSales(ctx)
}

func (m metricsSource) AllFigures(ctx context.Context) (flashgate.SaleFigures, error) {
	return m.s.store.AllFigures(ctx)
}

func (m metricsSource) RedisFigures(ctx context.Context, sales []flashgate.Sale) ([]*salehash.Figures, error) {
	ids := make([]string, len(sales))
	for i, sale := range sales {
		ids[i] = sale.ID
	}
	rfs, err := salehash.Read(ctx, m.s.rdb, ids)
	if err != nil {
		return nil, err
	}
	out := make([]*salehash.Figures, len(rfs))
	for i := range rfs {
		if _, err := m.s.buckets.Fold(ctx, sales[i], &rfs[i]); err == nil {
			out[i] = &rfs[i]
		}
	}
	return out, nil
}

func (m metricsSource) VariantBooked(ctx context.Context, sale flashgate.Sale) ([]int64, error) {
	vs, err := salestatus.Variants(ctx, m.s.rdb, sale)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(vs))
	for i, v := range vs {
		out[i] = v.Booked
	}
	return out, nil
}

func (m metricsSource) PausedSince() map[string]time.Time {
	out := map[string]time.Time{}
	for id, p := range m.s.failover.Paused() {
		out[id] = p.Since
	}
	return out
}

func (m metricsSource) Settlement(ctx context.Context, id string) (int64, bool, error) {
	st, err := m.s.SaleStatus(ctx, id)
	if err != nil || st.Settlement == nil {
		return 0, false, err
	}
	return st.Settlement.Difference, st.Settlement.Settled, nil
}

func (m metricsSource) DrawSteps(ctx context.Context, sale flashgate.Sale) (map[string]int64, error) {
	d, err := salestatus.ReadDraw(ctx, m.s.rdb, sale)
	if err != nil || d == nil {
		return nil, err
	}
	return map[string]int64{"made": d.Made, "pending": d.Pending, "entered": d.Entered, "withdrawn": d.Withdrawn,
		"won": d.Won, "lost": d.Lost, "captured": d.Captured, "released": d.Released,
		"winners": d.Winners, "promoted": d.Promoted}, nil
}
