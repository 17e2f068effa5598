package middleware

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware/challenge"
	"github.com/gatecount/gatecount/store"
)

// Default budgets of [SignIn], after OWASP's guidance on authentication and
// credential stuffing ([SignInOptions.WithDefaults] returns them).
var (
	defaultAccountIPFailures = limiter.Budget{Limit: 5, Window: 15 * time.Minute}
	defaultAccountFailures   = limiter.Budget{Limit: 20, Window: time.Hour}
	defaultIPAttempts        = limiter.Budget{Limit: 100, Window: time.Hour}
	// defaultNetworkAttempts bounds the attempts of one IPv4 /24 or IPv6
	// /48: ten addresses' worth. A campus or an office signs in from a few
	// addresses behind its NAT, each within its own budget. A spray that
	// turns off a password's bucket everywhere (65,536 buckets of
	// defaultPasswordSpray failures, some 1.3 M an hour) so needs over a
	// thousand such networks, not one /48.
	defaultNetworkAttempts = limiter.Budget{Limit: 1000, Window: time.Hour}
)

// codeAccountFailures is the account's budget of a guard of one-time codes
// (SignInOptions.Code): tighter than a password's, since a code has fewer
// values. Its budget per account and address is a password's.
var codeAccountFailures = limiter.Budget{Limit: 10, Window: time.Hour}

// wideNetworkTimes is how many times NetworkAttempts' limit an IPv6 /32
// gets. A /32 is a provider's: a mobile carrier's subscribers, the free
// tunnels of one broker, each with a /48 or a /64 of their own. So it is
// spared a heavy sign-in hour, and a spray needs some 80 providers.
const wideNetworkTimes = 16

// wideNetwork returns the budget of an IPv6 /32 derived from b, the
// NetworkAttempts of a /48: wideNetworkTimes its limit in its window,
// counted by a fixed window.
func wideNetwork(b limiter.Budget) limiter.Budget {
	return limiter.Budget{Limit: min(b.Limit*wideNetworkTimes, limiter.MaxLimit), Window: b.Window}
}

// defaultBackoffHistory is how long Backoff remembers lock-outs by default.
const defaultBackoffHistory = 24 * time.Hour

// MaxConsecutiveFailures is the most consecutive failed attempts NIST SP
// 800-63B allows on one account; the cap's default and its bound.
const MaxConsecutiveFailures = 100

// Defaults of Delay, after NIST SP 800-63B's example: 30 seconds, doubling
// to an hour.
const (
	defaultDelayAfter = 20
	defaultDelayFirst = 30 * time.Second
	defaultDelayMax   = time.Hour
)

// ErrAboveNIST is matched by the error of a cap on consecutive failures
// above [MaxConsecutiveFailures].
var ErrAboveNIST = fmt.Errorf("%w: NIST SP 800-63B allows at most %d consecutive failed attempts on an account", limiter.ErrInvalidBudget, MaxConsecutiveFailures)

// consecutiveBudget returns the budget of an account's failures since its
// last success: n of them (0 means MaxConsecutiveFailures) in the longest
// window. Below 1 or above MaxConsecutiveFailures is an error matching
// ErrAboveNIST.
func consecutiveBudget(name string, n int) (limiter.Budget, error) {
	n = cmp.Or(n, MaxConsecutiveFailures)
	if n < 1 || n > MaxConsecutiveFailures {
		return limiter.Budget{}, fmt.Errorf("middleware %q: ConsecutiveFailures %d: %w", name, n, ErrAboveNIST)
	}
	return limiter.Budget{Limit: n, Window: limiter.MaxWindow}, nil
}

// Delay makes attempts on an account that keeps failing wait, from a
// threshold of consecutive failures toward the cap. Past After failures
// since the account's last success, an attempt without a known device is
// refused, with Retry-After, until a delay has passed since the attempt
// before it. The delay is First for the first, doubling with each further
// failure, up to Max. The k-th consecutive attempt, k > After, waits
// min(First × 2^(k-After-1), Max) after the (k-1)-th. The server never
// sleeps.
type Delay struct {
	// After is how many consecutive failures pass undelayed; zero means
	// 20. At or above the cap, no attempt is delayed.
	After int
	// First is the first delay; zero means 30s.
	First time.Duration
	// Max caps a delay; zero means 1h.
	Max time.Duration
}

// withDefaults returns d with each zero field set to its default.
func (d Delay) withDefaults() Delay {
	d.After = cmp.Or(d.After, defaultDelayAfter)
	d.First = cmp.Or(d.First, defaultDelayFirst)
	d.Max = cmp.Or(d.Max, defaultDelayMax)
	return d
}

// wait returns how long the k-th consecutive attempt waits after the one
// before it; zero when it is not delayed.
func (d Delay) wait(k int) time.Duration {
	if k <= d.After {
		return 0
	}
	w := d.First
	for i := d.After + 1; i < k && w < d.Max; i++ {
		w *= 2
	}
	return min(w, d.Max)
}

// Backoff lengthens the lock-outs of an (account, client IP) pair that keeps
// failing. The first time its failures budget is spent, the pair waits out
// the rest of that budget's window, as without Backoff. Each further time
// within History, the wait doubles: the k-th lock-out lasts
// min(Window × 2^(k-1), Max) from the failure that spent the budget. The
// count of lock-outs outlives the budget's window, for History from the
// latest; a successful sign-in from the pair forgets it.
type Backoff struct {
	// Max caps a lock-out; zero turns Backoff off.
	Max time.Duration
	// History is how long lock-outs are remembered; zero means 24 hours.
	History time.Duration
}

// SignInOptions configure [SignIn]. The zero value gives the defaults.
type SignInOptions struct {
	// Code makes the guard one of a handler that checks a one-time code:
	// an emailed or SMS code, a TOTP, a recovery code. It has no device
	// cookies, password count, delay, back-off or challenge: Device,
	// Spray, Delay, Backoff, Challenge and ChallengeBudget are ignored. A
	// right code clears the account's failures from all clients, not only
	// its own. Its account budgets are tighter by default, and its name
	// "verify".
	Code bool
	// Name prefixes the names of the three budgets in logs and RateLimit
	// fields: NAME-account-ip, NAME-account and NAME-ip; "" means
	// "login", or "verify" under Code.
	Name string
	// AccountIPFailures bounds the failures of one account from one client
	// IP; zero means 5 per 15 minutes.
	AccountIPFailures limiter.Budget
	// AccountFailures bounds the failures of one account from all clients,
	// looser. A distributed guesser is so stopped, while a real user on
	// their own network is rarely locked out by strangers. Zero means 20
	// per hour, or 10 per hour under Code.
	AccountFailures limiter.Budget
	// IPAttempts bounds the attempts, failed or not, of one client IP on
	// all accounts: credential stuffing and password spraying; zero means
	// 100 per hour.
	IPAttempts limiter.Budget
	// NetworkAttempts bounds the attempts, failed or not, of the networks
	// a client gets cheaply: an IPv4 /24, an IPv6 /48 (NAME-network). An
	// IPv6 /32 gets 16 times its limit (NAME-network-wide). So a client
	// with many addresses pays for them (see [keyfunc.NetworksOf]). Zero
	// means 1,000 per hour (a /32 16,000): ten addresses' worth.
	NetworkAttempts limiter.Budget
	// Backoff lengthens repeated lock-outs; the zero value is off.
	Backoff Backoff
	// ConsecutiveFailures caps the failures of an account since its last
	// success, whatever the windows (NAME-consecutive). At the cap the
	// account admits no client without a known device until Unlock or
	// Recovered; known devices still sign in, and their successes no longer
	// clear the count. It also caps each known device's own failures since
	// its last success: past it, its token counts as none. A success keeps
	// the account's count a year, and each failure after a year from it. A
	// name that never signed in keeps it no longer than the guard's longest
	// windowed budget. Zero means
	// [MaxConsecutiveFailures] (100), which also bounds it.
	ConsecutiveFailures int
	// Delay makes further attempts wait from a threshold toward the cap
	// (NAME-delay); the zero value gives the defaults.
	Delay Delay
	// Challenge, when set, answers an attempt that the account's windowed
	// budget refuses with a challenge (see package challenge): a client that
	// answers it gets one more attempt, still subject to the delay ladder.
	// Nil refuses, as before. The guard writes a challenged refusal
	// itself, never OnLimit.
	Challenge challenge.Provider
	// ChallengeBudget bounds an account's challenged attempts
	// (NAME-challenge); zero means 10 per hour.
	ChallengeBudget limiter.Budget
	// OnEvent, when set, is told of each Event of the guard's accounts, on
	// the request's goroutine: it must not block for long.
	OnEvent func(Event)
	// Account reads the account checked, from the session of a second
	// step, say; nil means the body field Field. With Account set, no
	// password is counted (see Spray).
	Account keyfunc.Func
	// Field is the form or JSON body field holding the account name, when
	// Account is nil; "" means "username".
	Field string
	// Spray counts failures per password across accounts and addresses
	// (NAME-spray); the zero value turns it on (see [SprayOptions]).
	Spray SprayOptions
	// Normalize canonicalises the account name; nil means
	// [keyfunc.NormalizeUsername]. A name it rejects is treated as an
	// unreadable account (see Failed).
	Normalize func(string) (string, error)
	// Body bounds how much of the body is read to find Field, and how long
	// its value may be. The body may be a form, multipart/form-data or JSON
	// (see [keyfunc.BodyFields]).
	Body keyfunc.BodyOptions
	// Failed answers an attempt whose account the guard cannot read. That
	// is a duplicate field (in any letter case), or a value over the bound
	// or that Normalize rejects. It is also an unsupported or malformed
	// media type, or a malformed body. Such an attempt is counted against
	// the client address's budget only, never under an empty account. The
	// handler does not run, since it could read an account the guard did
	// not count. Failed must answer exactly as the handler answers a wrong
	// password; nil means 401 with an application/problem+json body.
	Failed http.Handler
	// Device configures the device cookies issued on a successful sign-in;
	// the zero value turns them on with the defaults (see [DeviceOptions]).
	Device DeviceOptions
	// IP configures the client address (trusted proxies, IPv6 prefix).
	IP keyfunc.IPOptions
	// Success tells a successful sign-in by its status when the handler
	// reports nothing; nil means status < 400.
	Success func(status int) bool
	// Remaining says whether the RateLimit fields tell the attempts left;
	// the zero value hides them, since they tell a guesser how to pace.
	Remaining Remaining
	// LegacyHeaders adds X-RateLimit-* fields.
	LegacyHeaders bool
	// OnLimit replaces the 429 answer. Retry-After and the RateLimit fields
	// are already set when it runs, from the refusing budget whose window
	// ends last (d.RetryAfter is the first refusing budget's).
	OnLimit func(w http.ResponseWriter, r *http.Request, d limiter.Decision)
	// Unavailable is what to answer when the store is unavailable; the zero
	// value, [limiter.Unset], means Local: guessing stays limited per instance, and users can still
	// sign in.
	Unavailable limiter.Policy
	// UnavailableRetryAfter is the Retry-After of a 503; 0 means
	// [DefaultUnavailableRetryAfter].
	UnavailableRetryAfter time.Duration
	// Observer, when set, is told of every decision (see [limiter.Observer]).
	Observer limiter.Observer
	// Logger receives the guard's logs; nil means slog.Default().
	Logger *slog.Logger
	// Skip, when it returns true, lets a request through uncounted, with
	// its account read (an unreadable one is answered by Failed) and no
	// device cookie issued.
	Skip func(r *http.Request) bool
	// Shadow counts as the guard would but refuses nothing and adds no
	// fields (see Options.Shadow).
	Shadow bool
	// Networks answers requests from its Block networks 403, counting
	// nothing; those from Exempt are not charged to the address's budgets
	// (NAME-ip and the networks'), and still to the account's.
	Networks keyfunc.Networks
}

// SignInGuard throttles a sign-in handler. Build one with [SignIn].
//
// Its keys, in the store handle it counts in, are part of its contract.
// ACCOUNT is the normalised account, IP the client's key
// ([keyfunc.IPKeyer.AddrKey]), and each key is [keyfunc.JoinKeys] of the parts:
//
//	("account", ACCOUNT)              failures of the account: NAME-account
//	("account-ip", ACCOUNT, IP)       failures of the account from IP: NAME-account-ip
//	("ip", IP)                        attempts of IP on all accounts: NAME-ip
//	("network", NET)                  attempts of IP's /24 or /48: NAME-network
//	("network", WIDE)                 attempts of IP's /32: NAME-network-wide
//	("device", ACCOUNT, DEVICE)       failures of a known device: NAME-device
//	("device-consecutive", ACCOUNT, DEVICE)
//	                                  its failures since its last success
//	("devices", ACCOUNT)              the account's last recovery (Recovered)
//	("lockouts", ACCOUNT, IP)         lock-outs of the pair, under Backoff
//	("consecutive", ACCOUNT)          failures since the last success: NAME-consecutive
//	("delay", ACCOUNT)                the wait of the next attempt: NAME-delay
//	("password", H)                   failed accounts of a password bucket: NAME-spray
//	("password-account", H, ACCOUNT)  attempts of the bucket on the account
//	("challenge", ACCOUNT)            challenged attempts: NAME-challenge
//	("puzzle", ID)                    an answered challenge, until it expires
//
// A guard of one-time codes (Code) has only the keys account, account-ip,
// ip, network and consecutive.
//
// NET and WIDE are the networks of [keyfunc.NetworksOf], such as
// "192.0.2.0/24" or "2001:db8:1::/48" and "2001:db8::/32".
// H is a password's bucket, 4 hexadecimal digits of 16 bits (see
// [PasswordBuckets]): no key holds more of a password.
//
// Unlock and Recovered clear an account's keys, Show reads them, and the
// limiter's Reset clears any one of them.
type SignInGuard struct {
	*guard
	o       SignInOptions
	reader  func(r *http.Request) (account, password string, err error)
	devices *devices // nil when off
	spray   *sprayer // nil when off
	rules   accountRules
	// entries maps the keys of an attempt of an unknown device to the
	// budgets of the RateLimit fields. sprayEntries maps those of one with
	// a password. addrEntries and devEntry hold the entries of the
	// address's and a known device's attempts.
	entries      [keyIP + addrKeys]int
	sprayEntries [keySprayIP + addrKeys]int
	addrEntries  [addrKeys]int
	devEntry     [4]int
	// delayFields name NAME-delay.
	delayFields *fields
	// challenge answers refusals by the account's budgets; nil when off.
	challenge *challenger
}

// accountRules are what sets a guard of an account's failures apart:
// a password's, or one-time codes' (SignInOptions.Code).
type accountRules struct {
	// consecutive bounds the account's failures since its last success.
	// Its window is strangersWindow: a count a success never kept (see
	// keepCap) expires with the guard's other budgets.
	consecutive limiter.Budget
	// delay turns the delay ladder (SignInOptions.Delay) on.
	delay bool
	// clearAccount clears the account's failures on a success, rather
	// than refunding the attempt's.
	clearAccount bool
	// account reads the account from the request; nil: the body field.
	account keyfunc.Func
}

// kept is the cap's budget over a year: that of a known device's own count,
// which only a successful sign-in makes.
func (r accountRules) kept() limiter.Budget {
	return limiter.Budget{Limit: r.consecutive.Limit, Window: limiter.MaxWindow}
}

// addrKeys is how many keys an attempt charges its address with, at most:
// the address's own, then its networks' (see SignInGuard.address).
const addrKeys = 3

// The indexes of the keys of one sign-in attempt of an unknown device; the
// address's keys come last, left out for an exempt address.
const (
	keyAccountIP = iota
	keyAccount
	keyConsecutive
	keyIP
)

// The indexes of the keys of a password, in an attempt of an unknown
// device with one: the address's keys move after them.
const (
	keySpray = keyIP + iota
	keyMarker
	keySprayIP
)

// The indexes of the keys of one sign-in attempt of a known device: its
// failures, the account's cap, the device's own cap, and the account's
// last recovery.
const (
	keyDevice = iota
	keyDeviceConsecutive
	keyDeviceCap
	keyRecovered
)

// strangersWindow is the longest a failure of a client without a known
// device is remembered by any key it charges but the cap's. That is the
// longest window of the guard's budgets, its back-off and its delays (the
// longest wait delayMax). The cap's count of an account that never signed
// in lives no longer.
func strangersWindow(o *SignInOptions, rules accountRules, spray bool, delayMax time.Duration) time.Duration {
	w := max(o.AccountIPFailures.Span(), o.AccountFailures.Span(), o.IPAttempts.Span(), o.NetworkAttempts.Span())
	if rules.delay {
		w = max(w, delayMax)
	}
	if o.Backoff.Max > 0 {
		w = max(w, o.Backoff.Max, o.Backoff.History)
	}
	if spray {
		w = max(w, o.Spray.Budget.Span())
	}
	if o.Challenge != nil {
		w = max(w, o.ChallengeBudget.Span())
		if p, ok := o.Challenge.(*challenge.ProofOfWork); ok {
			w = max(w, p.Lifetime()+time.Minute) // an answered puzzle's key
		}
	}
	return min(w, limiter.MaxWindow)
}

// keptSlack is how far short of a year from now a kept count's expiry may
// fall before an attempt keeps it again: one store update per account a day
// at most.
const keptSlack = 24 * time.Hour

// keepCap keeps the account's count toward the cap for limiter.MaxWindow
// from now, when its entry, ending at reset, ends more than keptSlack
// sooner, or always. A success keeps it, since only a success tells that
// an account is real; a failure keeps a kept count, so that its window runs
// from the last failure.
func (g *SignInGuard) keepCap(ctx context.Context, account string, now, reset time.Time, always bool) {
	if !always && reset.After(now.Add(limiter.MaxWindow-keptSlack)) {
		return
	}
	if err := g.l.Keep(ctx, keyfunc.JoinKeys("consecutive", account), limiter.MaxWindow); err != nil {
		g.log.Warn("cap's count not kept", "kind", KindRefundFailed, "err", err)
	}
}

// failedCap keeps the cap's count of a real account after a failure d
// counted in the store: one a success kept, whose entry (index i of d)
// ends more than twice the strangers' window away. A name's entry never
// does: the store's own lives one window, and one counted in process
// memory while the store was full and written in later, two at most. At
// the cap it is kept exactly, so that the cap ends MaxWindow after the
// failure that reached it.
func (g *SignInGuard) failedCap(ctx context.Context, account string, d *limiter.Decision, i int, capped bool) {
	if !d.Local && d.ResetOf(i).Sub(d.Now) > 2*g.rules.consecutive.Window {
		g.keepCap(ctx, account, d.Now, d.ResetOf(i), capped)
	}
}

// deviceConsecutive is the budget a known device's attempt charges the
// cap's key with: it counts, and never refuses.
var deviceConsecutive = limiter.Budget{Limit: limiter.MaxLimit, Window: limiter.MaxWindow}

// devicesEpoch is the budget a known device's attempt charges the key
// ("devices", ACCOUNT) with, and recovered the one Recovered opens it
// with. A device's charge never refuses, and keeps a live window's end;
// alone it opens a window of MinWindow. A window longer than that was
// opened by Recovered, MaxWindow before its end: tokens issued before, or
// in its millisecond, are revoked.
var (
	devicesEpoch = limiter.Budget{Limit: limiter.MaxLimit, Window: limiter.MinWindow}
	recovered    = limiter.Budget{Limit: limiter.MaxLimit, Window: limiter.MaxWindow}
)

// recoveredAt returns when the account last recovered, as the charge of
// its devices key at index i of d tells; the zero Time when not within
// MaxWindow.
func recoveredAt(d *limiter.Decision, i int) time.Time {
	end := d.ResetOf(i)
	if end.Sub(d.Now) <= limiter.MinWindow {
		return time.Time{}
	}
	return end.Add(-limiter.MaxWindow)
}

// demoted reports whether the known device dev of the attempt d decided no
// longer counts as known: its token predates the account's last recovery,
// or its own failures reached the cap. What d counted is given back first.
func (g *SignInGuard) demoted(r *http.Request, d *limiter.Decision, dev device) bool {
	if d.Unavailable && !d.Local {
		return false // nothing known of the store's keys
	}
	at := recoveredAt(d, keyRecovered)
	revoked := !at.IsZero() && !dev.issued.After(at)
	capped := !d.Allowed && d.KeyIndex == keyDeviceCap
	if !revoked && !capped {
		return false
	}
	if counted(d) {
		ctx, cancel := settling(r)
		defer cancel()
		if err := g.l.Refund(ctx, *d); err != nil {
			g.log.Warn("revoked device's attempt not given back", "kind", KindRefundFailed, "err", err)
		}
	}
	return true
}

// ownKeys are the keys of an attempt that describe the client's own use.
// The fields of an attempt that is not refused name one of them. They never
// name the account's budget, which would tell how others have used the
// account.
var ownKeys = []int{keyAccountIP, keyIP}

// sprayOwn are ownKeys in an attempt with a password.
var sprayOwn = []int{keyAccountIP, keySprayIP}

// SignIn returns a guard for a sign-in handler, counting in h (which it
// claims). Each attempt is counted in one atomic store update against three
// budgets: failures per (account, client IP), failures per account, and
// attempts per client IP, and against those of the address's networks (see
// NetworkAttempts). It is counted against the cap on the account's
// consecutive failures too (see ConsecutiveFailures and Delay). The attempt
// is charged before the handler runs, so that concurrent guesses cannot all
// reach the password check. The handler reports success with
// [ReportSuccess], or by a status Success accepts. The account's failure is
// then refunded, the (account, IP) failures are cleared, and the account's
// consecutive failures are set to zero and kept (see ConsecutiveFailures).
//
// The guard reads the account once, and the handler reads it from the guard
// (Account): the account checked is the one counted. An attempt whose
// account cannot be read is counted against the address budget and
// answered by Failed, without the handler.
//
// A successful sign-in gives the client a device cookie (see
// [DeviceOptions]). An attempt presenting a valid one for the account it
// names is counted against that device's own failures budget and its own
// consecutive cap, instead of the three above. Strangers' failures on the
// account or the address never lock it out. Clients without one, a
// distributed guesser's, keep the three budgets; so does a device past its
// cap, or whose token predates the account's last Recovered.
//
// With Spray on, as by default, the attempt's password is counted too, by
// its bucket (see [PasswordBuckets]), in the same update. A password that
// failed against more accounts than its budget is refused on every account,
// but from known devices. A success gives its charge back, and an (account,
// password) pair counted before counts no more.
//
// The guard never learns whether an account exists, so its answers for a
// known and an unknown account are the same at every attempt count: status,
// headers and body. Only the cap tells an account that has signed in, which
// reaches it, from one that never has. The handler must keep that too:
// answer an unknown account exactly like a wrong password, in comparable
// time. The RateLimit fields of an attempt that is not refused describe
// only the client's own budgets: the account from this address, and the
// address. They never tell how others have used the account. Those of a
// refusal name the refusing budget whose window ends last, so that
// Retry-After is never early. A refusal no budget made, the store and
// memory having no room to count it, names none.
//
// Under Code the guard checks one-time codes, on a handle apart from the
// password's guard: NIST counts failures per authenticator. It is the guard
// above without device cookies, password count, back-off or delays, and a
// right code clears the account's failures from every address.
func SignIn(h *store.Handle, o SignInOptions) (*SignInGuard, error) {
	o = o.WithDefaults()
	rules := accountRules{delay: !o.Code, clearAccount: o.Code, account: o.Account}
	if o.Code {
		o.Device, o.Spray, o.Delay, o.Backoff = DeviceOptions{Off: true}, SprayOptions{Off: true}, Delay{}.withDefaults(), Backoff{}
		o.Challenge, o.ChallengeBudget = nil, limiter.Budget{}
	}
	var err error
	if rules.consecutive, err = consecutiveBudget(o.Name, o.ConsecutiveFailures); err != nil {
		return nil, err
	}
	return newSignIn(h, o, rules)
}

// WithDefaults returns o with each zero field that has a default set to
// it: the name, the budgets, the cap, the account field, and but under
// Code the delay, the back-off's history (when it is on), the password
// count's field and budget, the device's failures and lifetime, and the
// challenge budget. SignIn starts with it. Functions, handlers and secrets
// are left as they are.
func (o SignInOptions) WithDefaults() SignInOptions {
	if o.Code {
		o.Name = cmp.Or(o.Name, "verify")
		o.AccountFailures = cmp.Or(o.AccountFailures, codeAccountFailures)
	} else {
		o.Name = cmp.Or(o.Name, "login")
		o.AccountFailures = cmp.Or(o.AccountFailures, defaultAccountFailures)
		o.Delay = o.Delay.withDefaults()
		if o.Backoff.Max != 0 {
			o.Backoff.History = cmp.Or(o.Backoff.History, defaultBackoffHistory)
		}
		o.Spray = o.Spray.withDefaults() // its field refused in the query string, the count on or off
		o.Device = o.Device.withDefaults()
		o.ChallengeBudget = cmp.Or(o.ChallengeBudget, defaultChallengeBudget)
	}
	o.AccountIPFailures = cmp.Or(o.AccountIPFailures, defaultAccountIPFailures)
	o.IPAttempts = cmp.Or(o.IPAttempts, defaultIPAttempts)
	o.NetworkAttempts = cmp.Or(o.NetworkAttempts, defaultNetworkAttempts)
	o.ConsecutiveFailures = cmp.Or(o.ConsecutiveFailures, MaxConsecutiveFailures)
	o.Field = cmp.Or(o.Field, "username")
	return o
}

// newSignIn returns a guard of an account's failures under rules.
func newSignIn(h *store.Handle, o SignInOptions, rules accountRules) (*SignInGuard, error) {
	if o.Normalize == nil {
		o.Normalize = keyfunc.NormalizeUsername
	}
	if o.Success == nil {
		o.Success = defaultSuccess
	}
	if o.Delay.After < 0 || o.Delay.First < limiter.MinWindow || o.Delay.Max < o.Delay.First || o.Delay.Max > limiter.MaxWindow ||
		o.Delay.First%time.Millisecond != 0 || o.Delay.Max%time.Millisecond != 0 {
		return nil, fmt.Errorf("middleware %q: Delay after %d, first %v, max %v: %w: want after ≥ 0, and whole milliseconds from %v ≤ first ≤ max ≤ %v",
			o.Name, o.Delay.After, o.Delay.First, o.Delay.Max, limiter.ErrInvalidBudget, limiter.MinWindow, limiter.MaxWindow)
	}
	if o.Backoff.Max != 0 {
		if o.Backoff.Max < o.AccountIPFailures.Window || o.Backoff.Max > limiter.MaxWindow || o.Backoff.History < time.Minute || o.Backoff.History > limiter.MaxWindow {
			return nil, fmt.Errorf("middleware %q: Backoff max %v must be from the account-IP window %v to %v, and history %v from 1m to %v",
				o.Name, o.Backoff.Max, o.AccountIPFailures.Window, limiter.MaxWindow, o.Backoff.History, limiter.MaxWindow)
		}
	}
	if o.Failed == nil {
		o.Failed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			writeProblem(w, http.StatusUnauthorized, problem401)
		})
	}
	if err := secretShared(h, &o, rules); err != nil {
		return nil, err
	}
	names := []string{o.Name + "-account-ip", o.Name + "-account", o.Name + "-consecutive"}
	budgets := []limiter.Budget{o.AccountIPFailures, o.AccountFailures, rules.consecutive}
	var spray *sprayer
	fSpray := len(names)
	if !o.Spray.Off && rules.account == nil {
		var err error
		if spray, err = newSprayer(o.Spray, o.Field, o.Device.Secret); err != nil {
			return nil, fmt.Errorf("middleware %q: %w", o.Name, err)
		}
		o.Spray = spray.o
		names = append(names, o.Name+"-spray")
		budgets = append(budgets, o.Spray.Budget)
	}
	fDevice := len(names)
	var dev *devices
	if !o.Device.Off {
		var err error
		if dev, err = newDevices(o.Device); err != nil {
			return nil, fmt.Errorf("middleware %q: %w", o.Name, err)
		}
		o.Device = dev.o
		names = append(names, o.Name+"-device")
		budgets = append(budgets, o.Device.Failures)
	}
	// The address budget comes last: it is the limiter's own. Its
	// networks' come before it.
	names = append(names, o.Name+"-network", o.Name+"-network-wide", o.Name+"-ip")
	budgets = append(budgets, o.NetworkAttempts, wideNetwork(o.NetworkAttempts), o.IPAttempts)
	g, err := newGuard(h, guardOptions{
		name:          o.Name,
		names:         names,
		budgets:       budgets,
		unavailable:   o.Unavailable,
		policy:        limiter.Local,
		ip:            &o.IP,
		hideRemaining: o.Remaining.hidden(true),
		legacy:        o.LegacyHeaders,
		retryAfter:    o.UnavailableRetryAfter,
		onLimit:       o.OnLimit,
		logger:        o.Logger,
		observer:      o.Observer,
		shadow:        o.Shadow,
		nets:          o.Networks,
	})
	if err != nil {
		return nil, err
	}
	fIP, fNet := len(names)-1, len(names)-3
	var read func(r *http.Request) (string, string, error)
	switch {
	case rules.account != nil:
		read = readAccount(rules.account)
	case spray != nil:
		read = bodyFields(o.Field, o.Spray.Field, o.Body)
	default:
		read = bodyFields(o.Field, "", o.Body)
	}
	delayName := o.Name + "-delay"
	if !isToken(delayName) {
		return nil, fmt.Errorf("middleware: name %q must be a token of letters, digits, '-', '_' and '.'", o.Name)
	}
	chal, err := newChallenger(&o, rules.consecutive, spray != nil)
	if err != nil {
		return nil, err
	}
	delayMax := o.Delay.Max
	if chal != nil {
		delayMax += o.AccountFailures.Window // a challenged attempt's hold
	}
	rules.consecutive.Window = strangersWindow(&o, rules, spray != nil, delayMax)
	return &SignInGuard{
		guard: g, o: o, reader: read, devices: dev, spray: spray, rules: rules, challenge: chal,
		entries:      [keyIP + addrKeys]int{keyAccountIP, keyAccount, keyConsecutive, fIP, fNet, fNet + 1},
		sprayEntries: [keySprayIP + addrKeys]int{keyAccountIP, keyAccount, keyConsecutive, fSpray, fSpray, fIP, fNet, fNet + 1},
		addrEntries:  [addrKeys]int{fIP, fNet, fNet + 1}, devEntry: [4]int{fDevice, keyConsecutive, keyConsecutive, fDevice},
		delayFields: newFields([]string{delayName}, []limiter.Budget{{Limit: 1, Window: delayMax}}, o.Remaining.hidden(true), o.LegacyHeaders),
	}, nil
}

// ErrNoSecret is matched by the error of a guard on a shared store whose
// device cookies, password count or puzzles have no secret to key them.
var ErrNoSecret = errors.New("middleware: a guard on a shared store needs a secret")

// secretShared refuses o on h, a shared store, when what it keys has no
// secret. A key of each process would sign cookies and puzzles that other
// instances refuse, and count one password apart on each.
func secretShared(h *store.Handle, o *SignInOptions, rules accountRules) error {
	if !h.Shared() {
		return nil
	}
	var what string
	p, pow := o.Challenge.(*challenge.ProofOfWork)
	switch {
	case o.Device.Secret == nil && !o.Device.Off:
		what = "device cookies (DeviceOptions.Secret)"
	case o.Device.Secret == nil && !o.Spray.Off && rules.account == nil:
		what = "password count (DeviceOptions.Secret)"
	case pow && !p.Shared():
		what = "puzzles (challenge.ProofOfWorkOptions.Secret)"
	default:
		return nil
	}
	return fmt.Errorf("middleware %q: %w for its %s: GATECOUNT_SECRET, the same on every instance", o.Name, ErrNoSecret, what)
}

// ReadAccount returns the account named in r's body as the guard counts it:
// the name normalised. It fails, with an error matching [keyfunc.ErrNoKey],
// when the body cannot be read (see SignInOptions.Failed) or Normalize
// rejects the name. The body is restored for the handler.
func (g *SignInGuard) ReadAccount(r *http.Request) (string, error) {
	name, _, err := g.readAttempt(r)
	return name, err
}

// readAttempt returns the account of r, as ReadAccount does, and its
// password when the guard counts them: "" when off or absent.
func (g *SignInGuard) readAttempt(r *http.Request) (account, password string, err error) {
	raw, password, err := g.reader(r)
	if err != nil {
		return "", "", err
	}
	name, err := g.o.Normalize(raw)
	if err == nil && name == "" {
		err = errors.New("normalised to the empty string")
	}
	if err != nil {
		if errors.Is(err, keyfunc.ErrNoKey) {
			return "", "", fmt.Errorf("middleware: account: %w", err)
		}
		return "", "", fmt.Errorf("middleware: account: %w: %w", keyfunc.ErrInvalidAccount, err)
	}
	return name, password, nil
}

// readAccount adapts f, which reads an account alone, to a reader of an
// account and its password, which it never has.
func readAccount(f keyfunc.Func) func(r *http.Request) (string, string, error) {
	return func(r *http.Request) (string, string, error) {
		v, err := f(r)
		return v, "", err
	}
}

// Wrap returns next guarded by g.
func (g *SignInGuard) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.count(w, r, next) })
}

func (g *SignInGuard) count(w http.ResponseWriter, r *http.Request, next http.Handler) {
	exempt, ok := g.screen(w, r)
	if !ok {
		return
	}
	if g.o.Spray.Field != "" && inQuery(r, g.o.Spray.Field) {
		g.warn.Do(func() {
			g.log.Warn("sign-in attempt refused: the password is in the query string", "kind", KindPasswordInQuery, "field", g.o.Spray.Field)
		})
		writeProblem(w, http.StatusBadRequest, problem400)
		return
	}
	if g.o.Skip != nil && g.o.Skip(r) {
		g.skip(w, r, next)
		return
	}
	ip, ok := g.clientIP(w, r)
	if !ok {
		return
	}
	account, password, err := g.readAttempt(r)
	if err != nil {
		g.unreadable(w, r, ip, exempt, err)
		return
	}
	a := &signInAttempt{g: g, out: outcome{account: account}, ip: ip}
	var dev device
	if g.devices != nil {
		dev, a.known = g.devices.known(r, account)
	}
	a.accountIP = keyfunc.JoinKeys("account-ip", account, ip)
	p := pass{r: r.WithContext(context.WithValue(r.Context(), outcomeKey{}, &a.out)), next: next, run: a}
	var d limiter.Decision
	consecutive := keyfunc.JoinKeys("consecutive", account)
	if a.known {
		// A known device's store calls wait in a queue of their own, and
		// its keys keep room in memory, that strangers' floods cannot take.
		a.device = keyfunc.JoinKeys("device", account, dev.id)
		a.deviceCap = keyfunc.JoinKeys("device-consecutive", account, dev.id)
		d, ok = g.attempt(w, r.WithContext(limiter.Vouch(r.Context())),
			limiter.Charge{Key: a.device, Budget: g.o.Device.Failures},
			limiter.Charge{Key: consecutive, Budget: deviceConsecutive},
			limiter.Charge{Key: a.deviceCap, Budget: g.rules.kept()},
			limiter.Charge{Key: keyfunc.JoinKeys("devices", account), Budget: devicesEpoch})
		p.entries, p.own = g.devEntry[:], deviceOwn
		if ok && g.demoted(r, &d, dev) {
			a.known = false // counted below as any client without a device
		} else {
			p.r = p.r.WithContext(limiter.Vouch(p.r.Context())) // and what follows its check
		}
	}
	if !ok {
		return
	}
	if !a.known {
		if a.sprayed = g.spray != nil && password != ""; a.sprayed {
			a.spray, a.marker = g.spray.keys(password, account)
		}
		if g.challenge != nil && g.answered(w, r, &p, a, exempt) {
			return
		}
		charges := [keySprayIP + addrKeys]limiter.Charge{
			keyAccountIP:   {Key: a.accountIP, Budget: g.o.AccountIPFailures},
			keyAccount:     {Key: keyfunc.JoinKeys("account", account), Budget: g.o.AccountFailures},
			keyConsecutive: {Key: consecutive, Budget: g.rules.consecutive},
		}
		n := keyIP
		p.entries, p.own = g.entries[:], ownKeys
		if a.sprayed {
			charges[keySpray] = limiter.Charge{Key: a.spray, Budget: g.o.Spray.Budget}
			charges[keyMarker] = limiter.Charge{Key: a.marker, Budget: sprayMarker(g.o.Spray.Budget)}
			n = keySprayIP
			p.entries, p.own = g.sprayEntries[:], sprayOwn
		}
		if exempt { // the address's budgets come last
			p.own = p.own[:1]
		} else {
			n = len(g.address(charges[:n], ip))
		}
		p.entries = p.entries[:n]
		if d, ok = g.attempt(w, r, charges[:n]...); ok && g.rules.delay && counted(&d) {
			ok = g.delay(w, r, &d, a, 0)
		}
		if ok && g.challenge != nil && challengeable(&d, a) {
			g.issue(w, r, &d, &pass{r: r, entries: p.entries}, a)
			return
		}
	}
	if ok {
		g.serve(w, &d, &p)
	}
}

// address appends to cs the charges of the client's address ip: its own
// budget (NAME-ip), then its networks' (NAME-network, NAME-network-wide;
// see keyfunc.NetworksOf). They are at most addrKeys.
func (g *SignInGuard) address(cs []limiter.Charge, ip string) []limiter.Charge {
	cs = append(cs, limiter.Charge{Key: keyfunc.JoinKeys("ip", ip), Budget: g.o.IPAttempts})
	narrow, wide := keyfunc.NetworksOf(ip)
	if narrow.IsValid() {
		cs = append(cs, limiter.Charge{Key: keyfunc.JoinKeys("network", narrow.String()), Budget: g.o.NetworkAttempts})
	}
	if wide.IsValid() {
		cs = append(cs, limiter.Charge{Key: keyfunc.JoinKeys("network", wide.String()), Budget: wideNetwork(g.o.NetworkAttempts)})
	}
	return cs
}

// roomFrom reports whether each key of d from at on has room left: the
// address's budgets, which come last, refused nothing.
func roomFrom(d *limiter.Decision, at int) bool {
	for i := at; i < len(d.Keys()); i++ {
		if d.RemainingOf(i) == 0 {
			return false
		}
	}
	return true
}

// inQuery reports whether r's query string holds field, in any letter
// case: a password there leaks into logs, proxies and histories.
func inQuery(r *http.Request, field string) bool {
	if r.URL.RawQuery == "" {
		return false
	}
	q, _ := url.ParseQuery(r.URL.RawQuery) // what it could read
	for k := range q {
		if strings.EqualFold(k, field) {
			return true
		}
	}
	return false
}

// deviceOwn are the keys of a known device's attempt its fields may name:
// the device's, never the account's cap.
var deviceOwn = []int{keyDevice}

// charged reports whether d admitted an attempt it charged, in the store or
// in process memory, in shadow too: one a Credit gives back.
func charged(d *limiter.Decision) bool {
	return d.Allowed && (!d.Unavailable || d.Local)
}

// counted reports whether d admitted an attempt it counted, in the store or
// in process memory, so that its counts are known.
func counted(d *limiter.Decision) bool {
	return d.Allowed && !d.Shadow && (!d.Unavailable || d.Local)
}

// delay applies the delay ladder to the attempt d admitted. Past the
// threshold, the attempt takes the account's one slot of the delay, which
// it holds for the wait of the attempt after it, plus hold. With no slot
// free it gives back d, answers the refusal and reports false. That
// refusal is never challenged.
func (g *SignInGuard) delay(w http.ResponseWriter, r *http.Request, d *limiter.Decision, a *signInAttempt, hold time.Duration) bool {
	n := g.rules.consecutive.Limit - d.RemainingOf(keyConsecutive) // this attempt included
	wait := g.o.Delay.wait(n + 1)
	if wait == 0 || n >= g.rules.consecutive.Limit {
		return true
	}
	wait += hold
	dd, err := g.l.AttemptEach(r.Context(), limiter.Charge{Key: keyfunc.JoinKeys("delay", a.out.account), Budget: limiter.Budget{Limit: 1, Window: wait}})
	switch {
	case err != nil && r.Context().Err() != nil:
		return true // answered by the client's absence or the deadline, in serve
	case err != nil:
		g.log.Error("delay not counted", "kind", KindCountFailed, "err", err)
		return true // the attempt itself was counted
	case dd.Allowed || dd.Shadow:
		if counted(&dd) {
			a.delayed, a.failures = &dd, n
		}
		return true
	}
	ctx, cancel := settling(r)
	defer cancel()
	if err := g.l.Refund(ctx, *d); err != nil {
		g.log.Warn("delayed attempt not refunded", "kind", KindRefundFailed, "err", err)
	}
	g.serve(w, &dd, &pass{r: r, fields: g.delayFields})
	return false
}

// signInAttempt is one counted sign-in attempt: what the handler is told,
// and what crediting its outcome needs.
type signInAttempt struct {
	g             *SignInGuard
	out           outcome
	ip, accountIP string
	// device and deviceCap are the keys of a known device's failures and
	// of its own cap.
	device, deviceCap string
	known             bool
	// sprayed reports that the attempt charged its password's keys, spray
	// and marker; repeat that its pair was counted before, so that its
	// charge of spray was given back.
	sprayed       bool
	spray, marker string
	repeat        bool
	// delayed is the decision that took the account's delay slot, and
	// failures the consecutive count it was taken at; nil when none.
	delayed  *limiter.Decision
	failures int
	// challenged: the attempt was let through by an answered challenge.
	challenged bool
}

// sprayKey returns the index of the password's bucket among the keys of
// a's decision; the pair's marker follows it.
func (a *signInAttempt) sprayKey() int {
	if a.challenged {
		return chalSpray
	}
	return keySpray
}

// run runs the handler of an allowed attempt, counted; run is never called
// for one let through uncounted. It issues a device cookie with a
// successful answer, and credits or backs off by the outcome. The charge of
// a password on a pair counted before is given back first.
func (a *signInAttempt) run(w http.ResponseWriter, r *http.Request, next http.Handler, d limiter.Decision) {
	g := a.g
	success := func(status int) bool {
		return a.out.said == saidSuccess || (a.out.said == saidNothing && g.o.Success(status))
	}
	rw := &responseWriter{ResponseWriter: w}
	if g.devices != nil {
		rw.header = func(status int) {
			if success(status) {
				g.devices.issue(w.Header(), a.out.account)
			}
		}
	}
	// What follows the check is written whether the client waits or not,
	// within settleWithin.
	ctx, cancel := settling(r)
	defer cancel()
	if a.sprayed && limiter.MaxLimit-d.RemainingOf(a.sprayKey()+1) > 1 {
		// The pair was counted before: one owner retyping a password
		// counts once.
		a.repeat = true
		if err := g.l.Credit(ctx, d, []int{a.sprayKey()}); err != nil {
			g.log.Warn("repeated password not given back", "kind", KindRefundFailed, "err", err)
		}
	}
	next.ServeHTTP(rw, r)
	if rw.status == 0 {
		rw.final(http.StatusOK) // nothing written: net/http answers 200 with the header as it stands
	}
	account := a.out.account
	switch {
	case success(rw.status) && a.known:
		// The count before this attempt, which counted one. Below the cap
		// the success clears it; at the cap only Unlock or Recovered do,
		// so that the owner's daily sign-in never reopens the account to
		// another hundred guesses.
		n := limiter.MaxLimit - d.RemainingOf(keyDeviceConsecutive) - 1
		var err error
		locked := counted(&d) && n >= g.rules.consecutive.Limit
		switch {
		case locked:
			err = g.l.Credit(ctx, d, []int{keyDeviceConsecutive}, a.device, a.deviceCap)
			g.event(ctx, r, Event{Kind: EventKnownDevice, Account: account, Budget: g.o.Name + "-consecutive", Failures: n, Limit: g.rules.consecutive.Limit, Time: d.Now})
		case n == 0: // the count holds this attempt alone: a refund keeps its entry
			err = g.l.Credit(ctx, d, []int{keyDeviceConsecutive}, a.device, a.deviceCap, keyfunc.JoinKeys("delay", account))
		default:
			err = g.l.Credit(ctx, d, nil, a.device, a.deviceCap, keyfunc.JoinKeys("consecutive", account), keyfunc.JoinKeys("delay", account))
		}
		if err != nil {
			g.log.Warn("successful sign-in not credited", "kind", KindRefundFailed, "err", err)
		}
		if charged(&d) && !locked {
			g.keepCap(ctx, account, d.Now, d.ResetOf(keyDeviceConsecutive), n > 0)
		}
	case a.known:
		if charged(&d) {
			g.failedCap(ctx, account, &d, keyDeviceConsecutive, limiter.MaxLimit-d.RemainingOf(keyDeviceConsecutive) == g.rules.consecutive.Limit)
		}
		if counted(&d) && d.RemainingOf(keyDeviceCap) == 0 {
			// The device's own cap: its next attempt counts as a stranger's.
			g.event(ctx, r, Event{Kind: EventCapReached, Account: account, Budget: g.o.Name + "-device-consecutive",
				Failures: g.rules.consecutive.Limit, Limit: g.rules.consecutive.Limit, Time: d.Now})
		}
	case a.challenged:
		g.challengeDone(ctx, r, &d, a, success(rw.status))
	case success(rw.status):
		g.succeeded(ctx, &d, a)
	default:
		g.failed(ctx, r, &d, a)
	}
}

// failed does what follows a failure of an unknown client: the back-off,
// and an event for each budget the failure spent.
func (g *SignInGuard) failed(ctx context.Context, r *http.Request, d *limiter.Decision, a *signInAttempt) {
	if g.o.Backoff.Max > 0 && d.RemainingOf(keyAccountIP) == 0 {
		g.lockOut(ctx, a.accountIP, a.out.account, a.ip)
	}
	account := a.out.account
	if charged(d) {
		g.failedCap(ctx, account, d, keyConsecutive, d.RemainingOf(keyConsecutive) == 0)
	}
	if !counted(d) {
		return
	}
	if d.RemainingOf(keyAccount) == 0 {
		g.event(ctx, r, Event{Kind: EventBudgetSpent, Account: account, Budget: g.o.Name + "-account",
			Failures: g.o.AccountFailures.Limit, Limit: g.o.AccountFailures.Limit, Until: d.ResetOf(keyAccount), Time: d.Now})
	}
	if d.RemainingOf(keyConsecutive) == 0 {
		g.event(ctx, r, Event{Kind: EventCapReached, Account: account, Budget: g.o.Name + "-consecutive",
			Failures: g.rules.consecutive.Limit, Limit: g.rules.consecutive.Limit, Time: d.Now})
	}
	g.passwordAndDelay(ctx, r, d, a)
	g.challengesBegin(ctx, r, d, a)
}

// passwordAndDelay emits the events of a failure, counted in d, that every
// path shares: the password's budget spent, and a delay imposed.
func (g *SignInGuard) passwordAndDelay(ctx context.Context, r *http.Request, d *limiter.Decision, a *signInAttempt) {
	if i := a.sprayKey(); a.sprayed && !a.repeat && d.RemainingOf(i) == 0 {
		g.event(ctx, r, Event{Kind: EventPasswordSprayed, Budget: g.o.Name + "-spray",
			Failures: g.o.Spray.Budget.Limit, Limit: g.o.Spray.Budget.Limit, Until: d.ResetOf(i), Time: d.Now})
	}
	if dd := a.delayed; dd != nil {
		g.event(ctx, r, Event{Kind: EventDelayed, Account: a.out.account, Budget: g.o.Name + "-delay",
			Failures: a.failures, Limit: g.rules.consecutive.Limit, Until: dd.Reset, Time: dd.Now})
	}
}

// event emits e, of the guard, from r's client address.
func (g *SignInGuard) event(ctx context.Context, r *http.Request, e Event) {
	e.Guard = g.o.Name
	if a, err := g.ip.ClientAddr(r); err == nil {
		e.Addr = a
	}
	g.emit(ctx, g.o.OnEvent, e)
}

// unreadable counts an attempt whose account cannot be read against the
// client address's budget. It answers it as Failed does, or 429 when that
// budget is spent; the handler does not run.
func (g *SignInGuard) unreadable(w http.ResponseWriter, r *http.Request, ip string, exempt bool, err error) {
	g.warn.Do(func() { g.log.Info("sign-in attempt without a readable account", "kind", KindNoKey, "err", err) })
	if exempt {
		g.o.Failed.ServeHTTP(w, r)
		return
	}
	var cs [addrKeys]limiter.Charge
	n := len(g.address(cs[:0], ip))
	d, ok := g.attempt(w, r, cs[:n]...)
	if ok {
		g.serve(w, &d, &pass{r: r, next: g.o.Failed, entries: g.addrEntries[:n]})
	}
}

// skip runs next for a request Skip lets through, uncounted, with its
// account read as for a counted one.
func (g *SignInGuard) skip(w http.ResponseWriter, r *http.Request, next http.Handler) {
	account, _, err := g.readAttempt(r)
	if err != nil {
		g.o.Failed.ServeHTTP(w, r)
		return
	}
	next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), outcomeKey{}, &outcome{account: account})))
}

// succeeded refunds the account's failure (or clears the account's
// failures, under rules.clearAccount) and the password's. It clears the
// (account, IP) failures and lock-outs, the account's consecutive failures
// and delay, and the marker of the (account, password) pair. It does all in
// one store update, retried until it lands (see limiter.Limiter.Credit).
func (g *SignInGuard) succeeded(ctx context.Context, d *limiter.Decision, a *signInAttempt) {
	account, ip := a.out.account, a.ip
	refund, cleared := make([]int, 0, 2), make([]string, 0, 6)
	if g.rules.clearAccount {
		cleared = append(cleared, keyfunc.JoinKeys("account", account))
	} else {
		refund = append(refund, keyAccount)
	}
	if a.sprayed {
		// A right password is no spray, and its bucket is not left
		// beside the account.
		if !a.repeat {
			refund = append(refund, keySpray)
		}
		cleared = append(cleared, a.marker)
	}
	// The cap's count holds this attempt alone, most often: a refund
	// leaves its entry, which keepCap need not make anew.
	alone := g.rules.consecutive.Limit-d.RemainingOf(keyConsecutive) == 1
	if alone {
		refund = append(refund, keyConsecutive)
	} else {
		cleared = append(cleared, keyfunc.JoinKeys("consecutive", account))
	}
	cleared = append(cleared, keyfunc.JoinKeys("account-ip", account, ip), keyfunc.JoinKeys("lockouts", account, ip),
		keyfunc.JoinKeys("delay", account))
	err := g.l.Credit(ctx, *d, refund, cleared...)
	if err != nil {
		g.log.Warn("successful sign-in not credited", "kind", KindRefundFailed, "err", err)
	}
	if charged(d) {
		g.keepCap(ctx, account, d.Now, d.ResetOf(keyConsecutive), !alone)
	}
}

// lockOut counts a lock-out of (account, IP), whose failures budget the
// attempt just spent, and lengthens it from the second on.
func (g *SignInGuard) lockOut(ctx context.Context, accountIP, account, ip string) {
	b := g.o.Backoff
	d, err := g.l.AttemptEach(ctx, limiter.Charge{Key: keyfunc.JoinKeys("lockouts", account, ip), Budget: limiter.Budget{Limit: limiter.MaxLimit, Window: b.History}})
	if err != nil || !d.Allowed || d.Unavailable {
		return
	}
	k := limiter.MaxLimit - d.Remaining // lock-outs within History, this one included
	if k < 2 {
		return
	}
	wait := g.o.AccountIPFailures.Window
	for i := 1; i < k && wait < b.Max; i++ {
		wait *= 2
	}
	wait = min(wait, b.Max)
	if err := g.l.Block(ctx, accountIP, wait); err != nil {
		g.log.Warn("lock-out not lengthened", "kind", KindBackoffFailed, "err", err)
	}
}
