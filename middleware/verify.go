package middleware

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/netip"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/store"
)

// Default budgets of Verify: tighter than [SignIn]'s, since a code has fewer
// values than a password.
var (
	DefaultCodeAccountIPFailures = limiter.Budget{Limit: 5, Window: 15 * time.Minute}
	DefaultCodeAccountFailures   = limiter.Budget{Limit: 10, Window: time.Hour}
)

// VerifyOptions configure Verify. The zero value gives the defaults. The
// fields [SignInOptions] also has mean what they mean there.
type VerifyOptions struct {
	// Name prefixes the names of the budgets in logs and RateLimit fields:
	// NAME-account-ip, NAME-account, NAME-consecutive and NAME-ip; ""
	// means "verify".
	Name string
	// AccountIPFailures bounds the failures of one account from one client
	// IP; zero means [DefaultCodeAccountIPFailures] (5 per 15 minutes).
	AccountIPFailures limiter.Budget
	// AccountFailures bounds the failures of one account from all clients;
	// zero means [DefaultCodeAccountFailures] (10 per hour).
	AccountFailures limiter.Budget
	// ConsecutiveFailures bounds the failures of one account since its
	// last success, whatever the windows; zero means
	// [MaxConsecutiveFailures] (100). Above it is an error matching
	// [ErrAboveNIST].
	ConsecutiveFailures int
	// IPAttempts bounds the attempts, failed or not, of one client IP on
	// all accounts; zero means [DefaultIPAttempts] (100 per hour).
	IPAttempts limiter.Budget
	// NetworkAttempts bounds the attempts of the client's networks, as
	// SignInOptions.NetworkAttempts does (NAME-network, NAME-network-wide);
	// zero means [DefaultNetworkAttempts].
	NetworkAttempts limiter.Budget
	// Account reads the account whose code is checked: from the session of
	// a second step, say. Nil means the body field Field.
	Account keyfunc.Func
	// Field is the form or JSON body field holding the account name, when
	// Account is nil; "" means "username".
	Field string
	// Normalize canonicalises the account name; nil means
	// [keyfunc.NormalizeUsername].
	Normalize func(string) (string, error)
	// Body bounds how much of the body is read to find Field.
	Body keyfunc.BodyOptions
	// Failed answers an attempt whose account the guard cannot read, and
	// must answer exactly as the handler answers a wrong code; nil means
	// 401 with an application/problem+json body.
	Failed http.Handler
	// IP configures the client address (trusted proxies, IPv6 prefix).
	IP keyfunc.IPOptions
	// Success tells a right code by its status when the handler reports
	// nothing; nil means status < 400.
	Success func(status int) bool
	// Remaining says whether the RateLimit fields tell the attempts left;
	// the zero value hides them.
	Remaining Remaining
	// LegacyHeaders adds X-RateLimit-* fields.
	LegacyHeaders bool
	// OnLimit replaces the 429 answer.
	OnLimit func(w http.ResponseWriter, r *http.Request, d limiter.Decision)
	// Unavailable is what to answer when the store is unavailable; the
	// zero value means Local.
	Unavailable limiter.Policy
	// UnavailableRetryAfter is the Retry-After of a 503; 0 means
	// [DefaultUnavailableRetryAfter].
	UnavailableRetryAfter time.Duration
	// Observer, when set, is told of every decision.
	Observer limiter.Observer
	// OnEvent, when set, is told of each Event of the guard's accounts
	// (see SignInOptions.OnEvent); Verify delays no attempt, so emits no
	// [EventDelayed].
	OnEvent func(Event)
	// Logger receives the guard's logs; nil means slog.Default().
	Logger *slog.Logger
	// Skip, when it returns true, lets a request through uncounted.
	Skip func(r *http.Request) bool
	// Shadow counts as the guard would but refuses nothing and adds no
	// fields.
	Shadow bool
	// Networks answers requests from its Block networks 403; those from
	// Exempt are not charged to the address's budgets (NAME-ip and the
	// networks').
	Networks keyfunc.Networks
}

// VerifyGuard throttles a handler that checks a one-time code: an emailed
// or SMS code, a TOTP, a recovery code. Build one with Verify.
//
// Its keys, in its own store handle, are [SignInGuard]'s but the device's,
// the lock-outs' and the delay's. They are ("account", ACCOUNT),
// ("account-ip", ACCOUNT, IP), ("ip", IP), ("network", NET),
// ("network", WIDE) and ("consecutive", ACCOUNT).
type VerifyGuard struct{ g *SignInGuard }

// Verify returns a guard for a handler that checks a one-time code,
// counting in h (which it claims) apart from the password's, as NIST
// counts failures per authenticator. It is [SignIn]'s guard without device
// cookies, back-off or delays, with its own consecutive cap: the account's
// failures since its last success, at most [MaxConsecutiveFailures]. Each
// attempt is charged against every budget in one atomic store update
// before the handler runs, so that concurrent guesses cannot all reach the
// check. The handler reports a right code with [ReportSuccess] (or a status
// Success accepts), which clears the account's failures from this address
// and from all, and sets its consecutive failures to zero, kept as
// SignIn's are. The answers are the same for a
// known and an unknown account; the handler must keep that too.
func Verify(h *store.Handle, o VerifyOptions) (*VerifyGuard, error) {
	o.Name = cmp.Or(o.Name, "verify")
	consecutive, err := consecutiveBudget(o.Name, o.ConsecutiveFailures)
	if err != nil {
		return nil, err
	}
	g, err := newSignIn(h, SignInOptions{
		Name:                  o.Name,
		ConsecutiveFailures:   consecutive.Limit,
		AccountIPFailures:     cmp.Or(o.AccountIPFailures, DefaultCodeAccountIPFailures),
		AccountFailures:       cmp.Or(o.AccountFailures, DefaultCodeAccountFailures),
		IPAttempts:            o.IPAttempts,
		NetworkAttempts:       o.NetworkAttempts,
		Field:                 o.Field,
		Normalize:             o.Normalize,
		Body:                  o.Body,
		Failed:                o.Failed,
		Device:                DeviceOptions{Off: true},
		Spray:                 SprayOptions{Off: true},
		IP:                    o.IP,
		Success:               o.Success,
		Remaining:             o.Remaining,
		LegacyHeaders:         o.LegacyHeaders,
		OnLimit:               o.OnLimit,
		Unavailable:           o.Unavailable,
		UnavailableRetryAfter: o.UnavailableRetryAfter,
		Observer:              o.Observer,
		OnEvent:               o.OnEvent,
		Logger:                o.Logger,
		Skip:                  o.Skip,
		Shadow:                o.Shadow,
		Networks:              o.Networks,
	}, accountRules{consecutive: consecutive, clearAccount: true, account: o.Account})
	if err != nil {
		return nil, err
	}
	return &VerifyGuard{g: g}, nil
}

// Wrap returns next guarded by g.
func (g *VerifyGuard) Wrap(next http.Handler) http.Handler { return g.g.Wrap(next) }

// ReadAccount returns the account of r as the guard counts it (see
// [SignInGuard.ReadAccount]).
func (g *VerifyGuard) ReadAccount(r *http.Request) (string, error) { return g.g.ReadAccount(r) }

// Unlock lets account try codes again: it clears the account's failures
// from all clients and its consecutive failures, and for each of addrs
// what [SignInGuard.Unlock] clears of it.
func (g *VerifyGuard) Unlock(ctx context.Context, account string, addrs ...netip.Addr) error {
	return g.g.Unlock(ctx, account, addrs...)
}

// Show reads, without counting, the account's failures and consecutive
// failures budgets, and for each of addrs the account's failures from it,
// its attempts budget and its networks'.
func (g *VerifyGuard) Show(ctx context.Context, account string, addrs ...netip.Addr) (Standing, error) {
	return g.g.Show(ctx, account, addrs...)
}

// Limiter returns the limiter that counts every budget.
func (g *VerifyGuard) Limiter() *limiter.Limiter { return g.g.Limiter() }

// Close releases what the limiter holds of its own (see
// [limiter.Limiter.Close]). The store is the caller's to close.
func (g *VerifyGuard) Close() error { return g.g.Close() }
