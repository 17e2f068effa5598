package middleware

import (
	"context"
	"log/slog"
	"net/netip"
	"time"
)

// EventKind names what happened to an account. Each is also the "kind" of
// the log line the guard writes for it.
type EventKind string

// The kinds of Event.
const (
	// EventBudgetSpent: a failure spent the account's windowed budget.
	// Attempts without a known device are refused until Until.
	EventBudgetSpent EventKind = "ratelimit-account-budget-spent"
	// EventDelayed: a failure past the delay threshold made the account's
	// next attempt without a known device wait until Until.
	EventDelayed EventKind = "ratelimit-account-delayed"
	// EventCapReached: a failure reached the cap on consecutive failures.
	// Attempts without a known device are refused until an unlock or a
	// recovery.
	EventCapReached EventKind = "ratelimit-account-cap-reached"
	// EventKnownDevice: a known device signed in while the account was at
	// its cap, which stays: one event per such sign-in.
	EventKnownDevice EventKind = "ratelimit-account-known-device"
	// EventChallengeIssued: a failure spent the account's budget, or
	// imposed a delay, on a guard with a Challenge: attempts without a
	// known device are challenged until Until (see SignInOptions.Challenge).
	EventChallengeIssued EventKind = "ratelimit-account-challenge-issued"
	// EventChallengePassed: a client that answered a challenge signed in.
	// Failures counts the challenged failures before it.
	EventChallengePassed EventKind = "ratelimit-account-challenge-passed"
	// EventChallengeFailed: a client that answered a challenge failed the
	// check behind it; one event per such attempt, at most the challenge
	// budget's Limit per window, which ends at Until.
	EventChallengeFailed EventKind = "ratelimit-account-challenge-failed"
	// EventUnlocked: an operator unlocked the account (Unlock).
	EventUnlocked EventKind = KindUnlocked
	// EventRecovered: the app reported a recovery of the account
	// (Recovered), such as a completed password reset.
	EventRecovered EventKind = "ratelimit-account-recovered"
	// EventPasswordSprayed: a failure spent a password's budget of failed
	// accounts (NAME-spray). Attempts with a password of its bucket are
	// refused, but from known devices, until Until. Account is "": the
	// event concerns a password, which no event carries.
	EventPasswordSprayed EventKind = "ratelimit-password-sprayed"
)

// Event is something an app may route to its audit log or its owner: a
// lock-out begun, a delay imposed, an unlock. A guard emits at most one
// per account (per password bucket, for EventPasswordSprayed) per window
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
