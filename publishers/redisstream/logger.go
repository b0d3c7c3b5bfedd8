package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// SetClientLogger sends go-redis' own log lines (a failed dial, a
// connection dropped by the pool) to l at Debug level, instead of the
// standard logger, which writes them to standard error. go-redis has one
// logger per process: the call affects every go-redis client of the
// process, publishers or not. A nil l discards them.
func SetClientLogger(l *slog.Logger) {
	redis.SetLogger(clientLogger{l})
}

type clientLogger struct{ l *slog.Logger }

// Printf implements go-redis' logging interface.
func (c clientLogger) Printf(ctx context.Context, format string, v ...any) {
	if c.l == nil {
		return
	}
	c.l.DebugContext(ctx, "go-redis: "+strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: "))
}
