package sqlledger

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"gorm.io/gorm/logger"
)

// slowStatement is the duration above which a statement is logged.
const slowStatement = 200 * time.Millisecond

// gormLogger adapts GORM's logger to slog. It logs slow statements and
// GORM's own messages, never argument values (they carry keys, headers and
// bodies) and never statement errors: those are returned to the caller,
// which logs them once, with the delivery's context.
type gormLogger struct {
	log   *slog.Logger
	level logger.LogLevel
}

func newGormLogger(l *slog.Logger) logger.Interface {
	if l == nil {
		return logger.Discard
	}
	return &gormLogger{log: l, level: logger.Warn}
}

func (g *gormLogger) LogMode(level logger.LogLevel) logger.Interface {
	c := *g
	c.level = level
	return &c
}

func (g *gormLogger) Info(ctx context.Context, msg string, data ...any) {
	if g.level >= logger.Info {
		g.log.InfoContext(ctx, fmt.Sprintf(msg, data...), "component", "sqlledger")
	}
}

func (g *gormLogger) Warn(ctx context.Context, msg string, data ...any) {
	if g.level >= logger.Warn {
		g.log.WarnContext(ctx, fmt.Sprintf(msg, data...), "component", "sqlledger")
	}
}

func (g *gormLogger) Error(ctx context.Context, msg string, data ...any) {
	if g.level >= logger.Error {
		g.log.ErrorContext(ctx, fmt.Sprintf(msg, data...), "component", "sqlledger")
	}
}

func (g *gormLogger) Trace(ctx context.Context, begin time.Time, fc func() (string, int64), _ error) {
	if g.level < logger.Warn {
		return
	}
	if elapsed := time.Since(begin); elapsed > slowStatement {
		sql, rows := fc()
		g.log.WarnContext(ctx, "slow SQL statement", "component", "sqlledger",
			"duration", elapsed, "sql", sql, "rows", rows)
	}
}

// ParamsFilter keeps argument values out of the SQL text GORM hands to
// Trace.
func (g *gormLogger) ParamsFilter(_ context.Context, sql string, _ ...any) (string, []any) {
	return sql, nil
}
