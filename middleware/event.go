package middleware

import (
	"context"
	"log/slog"
	"net/netip"
	"time"
)

// Event is something an app may route to its audit log or its owner: a
// lock-out begun, a delay imposed, an unlock. A guard emits at most one
// per account (per password bucket, for [EventPasswordSprayed]) per window
// of the budget concerned, never one per request.
// It never carries a password or a request body.
type Event struct {
	Kind EventKind
	// Guard is the name of the guard (SignInOptions.Name).
	Guard string
	// Account is the account, normalised as the guard counts it.
	Account string
	// Addr is the client address of the attempt that tipped it; the zero
	// Addr for an unlock or a recovery.
	Addr netip.Addr
	// Budget names the budget concerned, as the RateLimit fields do:
	// login-account, login-delay, login-consecutive. "" for an unlock or a
	// recovery.
	Budget string
	// Failures is the failures the budget counted, this one included.
	Failures int
	// Limit is the budget's limit.
	Limit int
	// Until is when the refusals end, on the store's clock; zero when they
	// last until an unlock or a recovery, or there are none.
	Until time.Time
	// Time is when it happened.
	Time time.Time
}

// LogValue describes e for a log line, without the account or the
// address.
func (e Event) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("guard", e.Guard)}
	if e.Budget != "" {
		attrs = append(attrs, slog.String("budget", e.Budget), slog.Int("failures", e.Failures), slog.Int("limit", e.Limit))
	}
	if !e.Until.IsZero() {
		attrs = append(attrs, slog.Time("until", e.Until))
	}
	return slog.GroupValue(attrs...)
}

// eventMessages are the log messages of each kind of event.
var eventMessages = map[EventKind]string{
	EventBudgetSpent:     "account budget spent",
	EventDelayed:         "account attempts delayed",
	EventCapReached:      "account reached its cap on consecutive failures",
	EventKnownDevice:     "known device signed in to an account at its cap",
	EventChallengeIssued: "account attempts challenged",
	EventChallengePassed: "challenged sign-in succeeded",
	EventChallengeFailed: "challenged attempt failed",
	EventUnlocked:        "account unlocked",
	EventRecovered:       "account recovered",
	EventPasswordSprayed: "password sprayed: refused on every account",
}

// emit logs e, with its kind and never its account, and hands it to on,
// when set, on the caller's goroutine.
func (g *guard) emit(ctx context.Context, on func(Event), e Event) {
	if e.Time.IsZero() {
		e.Time = time.Now()
	}
	g.log.LogAttrs(ctx, slog.LevelInfo, eventMessages[e.Kind], slog.String("kind", string(e.Kind)), slog.Any("event", e))
	if on != nil {
		on(e)
	}
}
