package middleware

// Log kinds: the stable "kind" attribute of the logs the middleware and
// the guards write. Every kind of gatecount reads limit-AREA-EVENT. Here
// the area is "request" (one request's key, count or refund), "guard" (a
// guard's keys and challenges) or "account" (the audit events, [EventKind]).
const (
	// KindNoKey is logged when a request gives no key: no client address,
	// no readable account or destination, or an error of the key function.
	KindNoKey = "limit-request-no-key"
	// KindLimited is logged when [Send] throttles a request: nothing is
	// sent for it. The line names the budget, never the client or the
	// destination.
	KindLimited = "limit-request-limited"
	// KindInvalidCharge is logged when Options.BudgetFor or Options.Cost
	// fails, or gives a budget or cost out of range: the request is
	// answered 500.
	KindInvalidCharge = "limit-request-invalid-charge"
	// KindCountFailed is logged when a guard could not count an attempt
	// (answered 400), or the delay after a failed one.
	KindCountFailed = "limit-request-count-failed"
	// KindRefundFailed is logged when a count could not be given back: a
	// successful request's, a successful sign-in's, a delayed attempt's,
	// or a repeated password's.
	KindRefundFailed = "limit-request-refund-failed"
	// KindForwardedUntrusted is logged, once, when a request carrying
	// X-Forwarded-For or Forwarded reaches a per-IP limiter that trusts no
	// proxy. Behind a proxy, every client would share the proxy's address
	// and budget.
	KindForwardedUntrusted = "limit-request-forwarded-untrusted"
	// KindPasswordInQuery is logged, at most once a second, when [SignIn]
	// answers 400 to a request with its password field in the query
	// string: a form sent by GET, say.
	KindPasswordInQuery = "limit-request-password-in-query"

	// KindChallengeRefused is logged, at most once a second, when the
	// guard refuses an answer to a challenge. The answer was malformed,
	// forged, expired, replayed, or for another account or address.
	KindChallengeRefused = "limit-guard-challenge-refused"
	// KindChallengeNotIssued is logged when the guard's [Challenge] fails
	// to issue a challenge, or issues a malformed one: the refusal stands.
	KindChallengeNotIssued = "limit-guard-challenge-not-issued"
	// KindBackoffFailed is logged when the sign-in guard could not lengthen
	// a lock-out of an account and address.
	KindBackoffFailed = "limit-guard-backoff-failed"

	// KindUnlocked is logged when an operator unlocks an account or a
	// destination. The line never names either.
	KindUnlocked = "limit-account-unlocked"
)

// EventKind names what happened to an account. Each is also the "kind" of
// the log line the guard writes for it.
type EventKind string

// The kinds of Event.
const (
	// EventBudgetSpent: a failure spent the account's windowed budget.
	// Attempts without a known device are refused until Until.
	EventBudgetSpent EventKind = "limit-account-budget-spent"
	// EventDelayed: a failure past the delay threshold made the account's
	// next attempt without a known device wait until Until.
	EventDelayed EventKind = "limit-account-delayed"
	// EventCapReached: a failure reached the cap on consecutive failures.
	// Attempts without a known device are refused until an unlock or a
	// recovery. With Budget NAME-device-consecutive, a known device's own
	// failures reached it: its attempts count as a stranger's from then on.
	EventCapReached EventKind = "limit-account-cap-reached"
	// EventKnownDevice: a known device signed in while the account was at
	// its cap, which stays: one event per such sign-in.
	EventKnownDevice EventKind = "limit-account-known-device"
	// EventChallengeIssued: a failure spent the account's windowed budget,
	// on a guard with a Challenge: attempts without a known device are
	// challenged until Until (see SignInOptions.Challenge).
	EventChallengeIssued EventKind = "limit-account-challenge-issued"
	// EventChallengePassed: a client that answered a challenge signed in.
	// Failures counts the challenged failures before it.
	EventChallengePassed EventKind = "limit-account-challenge-passed"
	// EventChallengeFailed: a client that answered a challenge failed the
	// check behind it; one event per such attempt, at most the challenge
	// budget's Limit per window, which ends at Until.
	EventChallengeFailed EventKind = "limit-account-challenge-failed"
	// EventUnlocked: an operator unlocked the account (Unlock).
	EventUnlocked EventKind = KindUnlocked
	// EventRecovered: the app reported a recovery of the account
	// (Recovered), such as a completed password reset.
	EventRecovered EventKind = "limit-account-recovered"
	// EventPasswordSprayed: a failure spent a password's budget of failed
	// accounts (NAME-spray). Attempts with a password of its bucket are
	// refused, but from known devices, until Until. Account is "": the
	// event concerns a password, which no event carries.
	EventPasswordSprayed EventKind = "limit-account-password-sprayed"
)
