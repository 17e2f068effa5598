package limiter_test

import "log/slog"

var quiet = slog.New(slog.DiscardHandler)
