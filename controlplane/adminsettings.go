package controlplane

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flashgate/flashgate"
)

// AdminSettings is what the admin API (controlplane/admin) serves a
// Service with, from its Config.
type AdminSettings struct {
	// Token is Config.AdminToken.
	Token string
	// Logger is Config.Logger and AuditLogger Config.AuditLogger (nil:
	// Logger with the attribute log=audit).
	Logger, AuditLogger *slog.Logger
	// Clock is Config.Clock.
	Clock flashgate.Clock
	// Gatherer is what /metrics serves (see Config.Gatherer).
	Gatherer prometheus.Gatherer
}

// AdminSettings returns the settings of s's admin API.
func (s *Service) AdminSettings() AdminSettings {
	return AdminSettings{Token: string(s.token), Logger: s.log, AuditLogger: s.auditLogger, Clock: s.clock, Gatherer: s.gatherer}
}

// Ready reports whether Redis and the database answer.
func (s *Service) Ready(ctx context.Context) error {
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if err := s.store.Ping(ctx); err != nil {
		return fmt.Errorf("database: %w", err)
	}
	return nil
}
