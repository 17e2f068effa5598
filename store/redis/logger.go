package redis

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"golang.org/x/time/rate"
)

// RedisLogger passes go-redis's own log lines to a slog.Logger, as warnings
// of kind [KindClient]. They then come out with the app's other records
// instead of as bare lines on stderr. go-redis logs through one logger for
// the whole process, set with go-redis's SetLogger:
//
//	goredis.SetLogger(redis.NewRedisLogger(logger))
//
// [OpenURL] does so with the store's logger, which then also carries the
// lines of any other go-redis client in the process; New leaves go-redis's
// logger alone. go-redis may log a line for every call that fails while a
// server is down. A RedisLogger passes on the first ten, then one every ten
// seconds, as the guard's own records already count the failures.
type RedisLogger struct {
	log   *slog.Logger
	every rate.Sometimes
}

// NewRedisLogger returns a [RedisLogger] writing to log (nil means
// slog.Default()).
func NewRedisLogger(log *slog.Logger) *RedisLogger {
	if log == nil {
		log = slog.Default()
	}
	return &RedisLogger{log: log, every: rate.Sometimes{First: 10, Interval: 10 * time.Second}}
}

// Printf logs one line of go-redis.
func (l *RedisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.every.Do(func() {
		line := strings.TrimPrefix(fmt.Sprintf(format, v...), "redis: ")
		l.log.WarnContext(ctx, "redis client: "+line, "kind", KindClient)
	})
}
