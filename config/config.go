// Package config reads gatecount's settings from the environment, in one
// place, and opens the limit store they choose. It is for any app. It reads
// where counts live, the secret, the bound, the trusted proxies and the
// budgets of the sign-in and send guards. The budgets of an app's other
// routes are the app's own ([Vars] reads them with the same checks).
//
// The variables, with their defaults:
//
//	RATE_LIMIT_STORE                    (see below) memory, database or redis
//	DATABASE_URL                        unset  postgres://…, sqlite:PATH or file:PATH
//	RATE_LIMIT_STORE_URL                unset  redis://… or rediss://…, one server or any node of a Cluster
//	REDIS_URL                           unset  redis://… or rediss://…, read when RATE_LIMIT_STORE_URL is unset
//	RATE_LIMIT_REDIS_ALLOW_EVICTION     false  true: accept a Redis that may evict live counts
//	RATE_LIMIT_SINGLE_INSTANCE          false  true: the app runs one instance
//	RATE_LIMIT_MAX_ENTRIES              the store's default (memory 100,000; others 1,000,000)
//	RATE_LIMIT_STORE_MAX_QUEUED         16,384  calls of one limiter that may wait for the store
//	RATE_LIMIT_STORE_MAX_IN_FLIGHT      64  store calls running in the backend at once
//	TRUSTED_PROXIES                     unset  comma-separated CIDRs whose forwarding headers are believed
//	TRUSTED_PROXY_HEADER                X-Forwarded-For  the one header they set: X-Forwarded-For or Forwarded
//	GATECOUNT_SECRET                    unset  required by the shared stores; at least 32 bytes
//
// and the budgets of the sign-in and send guards ([middleware.SignIn], Send):
//
//	RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES    5  sign-in failures per account and address, per 15 minutes
//	RATE_LIMIT_LOGIN_ACCOUNT_FAILURES      20  sign-in failures per account, per hour
//	RATE_LIMIT_LOGIN_IP_ATTEMPTS          100  sign-in attempts per address, per hour
//	RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS    1000  sign-in attempts per IPv4 /24 and IPv6 /48, per hour; an IPv6 /32 16 times it
//	RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES 100  an account's failures since its last success, at most 100 (NIST SP 800-63B)
//	RATE_LIMIT_LOGIN_DELAY_AFTER           20  consecutive failures before attempts wait 30s, doubling to 1h; the cap or above: never
//	RATE_LIMIT_LOGIN_SPRAY                 20  accounts a password may fail against, per hour, then refused for everyone; or off
//	RATE_LIMIT_LOGIN_SPRAY_FIELD     password  the body field holding the password
//	RATE_LIMIT_LOGIN_CHALLENGE            off  pow: a proof of work instead of a refusal by an account's windowed budget
//	RATE_LIMIT_LOGIN_CHALLENGE_BITS        17  the proof of work's base difficulty, 1 to 40 bits, one more per challenged failure
//	RATE_LIMIT_LOGIN_CHALLENGE_ATTEMPTS    10  challenged attempts per account, per hour
//	RATE_LIMIT_RESET_PER_DESTINATION        3  sends (password resets, codes) per destination, per hour
//	RATE_LIMIT_RESET_PER_IP                20  sends per address, per hour
//
// Each of those budgets but the consecutive cap and the delay is a limit,
// counted by a fixed window, or a limit and an algorithm. The algorithm is
// 5,sliding (a sliding window, limit at most 256), or 5,bucket or
// 5,bucket:20 (a token bucket, with its burst).
//
// Shadow, exemptions and blocks, for what an app builds from the
// environment (gatecount.FromEnv):
//
//	RATE_LIMIT_SHADOW                   false  true: every limiter in shadow; or names, such as login,execute
//	RATE_LIMIT_EXEMPT_NETWORKS          unset  comma-separated CIDRs whose requests skip the per-address budgets
//	RATE_LIMIT_BLOCK_NETWORKS           unset  comma-separated CIDRs whose requests are answered 403
//
// A limiter in shadow counts as it would, and reports its would-be
// refusals: metrics outcome shadow_denied, and one log line per key per
// window. It refuses nothing and adds no rate-limit fields. An exempt
// request skips the per-IP limiters and the guards' address budgets, never
// a caller's, an account's or a destination's. A blocked request is
// answered 403 before anything is counted; block wins over exempt. Open
// logs a warning ([KindExemptEveryone], [KindBlockEveryone]) when either holds
// every IPv4 or every IPv6 address.
//
// # Opening a store links only its driver
//
// [Open] opens a shared store through the driver its package registers
// from an init function, as database/sql drivers do. Importing config so
// links neither pgx, nor go-redis, nor SQLite. Import the store you use:
//
//	import _ "github.com/gatecount/gatecount/store/postgres" // DATABASE_URL=postgres://…
//	import _ "github.com/gatecount/gatecount/store/sqlite"   // DATABASE_URL=sqlite:PATH
//	import _ "github.com/gatecount/gatecount/store/redis"    // RATE_LIMIT_STORE_URL=redis://…
//
// A store chosen whose package is not imported is an error that names the
// import to add.
//
// The Redis store refuses to open on a server that may evict its keys (a
// maxmemory with a maxmemory-policy other than noeviction). An evicted
// count frees the budget of whoever it counted.
// RATE_LIMIT_REDIS_ALLOW_EVICTION=true accepts such a server, and the store
// logs the risk.
//
// RATE_LIMIT_STORE chooses where counts live. Unset, it is redis when
// RATE_LIMIT_STORE_URL or REDIS_URL is set, database when DATABASE_URL is
// set, and memory otherwise. A Redis URL and DATABASE_URL both set, with
// RATE_LIMIT_STORE unset, is an error naming both: set it to choose. Set it
// to memory to keep counts in memory when DATABASE_URL or REDIS_URL serves
// the app for other things. A URL it does not choose is not read. The
// memory store is not shared: on N instances every budget is multiplied by
// N. Open logs a warning that says so, unless
// RATE_LIMIT_SINGLE_INSTANCE=true.
//
// TRUSTED_PROXY_HEADER names the one forwarding header the proxies of
// TRUSTED_PROXIES set. The other header is ignored, since a client could
// otherwise send it through a proxy that does not overwrite it. A
// TRUSTED_PROXIES that trusts every address (0.0.0.0/0, ::/0) lets any
// client choose its own address: Open logs a warning of kind
// [KindTrustsEveryone].
//
// A bad value stops start-up. [Parse] returns an error naming every
// variable at fault and what it expects. It never echoes a password or a
// query string's values. A store that is chosen but cannot be opened is an
// error too, never a silent fall back to memory.
package config

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
	"github.com/gatecount/gatecount/store/keyhash"
	"github.com/gatecount/gatecount/store/storekit"
)

// Kind names a limit store.
type Kind string

// The stores.
const (
	Memory   Kind = "memory"
	Postgres Kind = "postgres"
	SQLite   Kind = "sqlite"
	Redis    Kind = "redis"
)

// Config is the configuration read from the environment.
type Config struct {
	Store          Kind   // RATE_LIMIT_STORE, or as the URLs imply
	DatabaseURL    string // DATABASE_URL
	StoreURL       string // RATE_LIMIT_STORE_URL
	RedisURL       string // REDIS_URL; the Redis store's when StoreURL is ""
	SingleInstance bool   // RATE_LIMIT_SINGLE_INSTANCE
	MaxEntries     int    // RATE_LIMIT_MAX_ENTRIES; 0: the store's default
	// MaxQueued is RATE_LIMIT_STORE_MAX_QUEUED, the calls of one limiter
	// that may wait for the store at once (store.Options.MaxQueued); 0:
	// the default.
	MaxQueued int
	// MaxInFlight is RATE_LIMIT_STORE_MAX_IN_FLIGHT, the store calls
	// running in the backend at once (store.Options.MaxInFlight); 0: the
	// default.
	MaxInFlight    int
	TrustedProxies []netip.Prefix
	Secret         []byte // GATECOUNT_SECRET

	// TrustedProxyHeader is the one forwarding header the trusted proxies
	// set (TRUSTED_PROXY_HEADER); the other is ignored.
	TrustedProxyHeader keyfunc.HeaderMode

	// RedisAllowEviction accepts a Redis that may evict live counts
	// (RATE_LIMIT_REDIS_ALLOW_EVICTION).
	RedisAllowEviction bool

	// SignIn holds the sign-in guard's budgets (RATE_LIMIT_LOGIN_*).
	SignIn SignInBudgets
	// Send holds the send guard's budgets (RATE_LIMIT_RESET_*).
	Send SendBudgets
	// Shadow, exemptions and blocks (traffic.go).
	Shadow         Shadow         // RATE_LIMIT_SHADOW
	ExemptNetworks []netip.Prefix // RATE_LIMIT_EXEMPT_NETWORKS
	BlockNetworks  []netip.Prefix // RATE_LIMIT_BLOCK_NETWORKS
}

// SignInBudgets are the budgets of a sign-in guard ([middleware.SignIn]),
// middleware's defaults where unset.
type SignInBudgets struct {
	AccountIPFailures limiter.Budget // RATE_LIMIT_LOGIN_ACCOUNT_IP_FAILURES, per 15 minutes
	AccountFailures   limiter.Budget // RATE_LIMIT_LOGIN_ACCOUNT_FAILURES, per hour
	IPAttempts        limiter.Budget // RATE_LIMIT_LOGIN_IP_ATTEMPTS, per hour
	// ConsecutiveFailures caps an account's failures since its last
	// success (RATE_LIMIT_LOGIN_CONSECUTIVE_FAILURES), at most
	// [middleware.MaxConsecutiveFailures].
	ConsecutiveFailures int
	// DelayAfter is the consecutive failures before attempts wait
	// (RATE_LIMIT_LOGIN_DELAY_AFTER; see [middleware.Delay]).
	DelayAfter int
	// Spray counts failures per password (RATE_LIMIT_LOGIN_SPRAY, per
	// hour, or off; RATE_LIMIT_LOGIN_SPRAY_FIELD).
	Spray middleware.SprayOptions
	// Challenge answers a refusal by an account's windowed budget with a
	// challenge: a [challenge.ProofOfWork] under GATECOUNT_SECRET when
	// RATE_LIMIT_LOGIN_CHALLENGE is pow, of RATE_LIMIT_LOGIN_CHALLENGE_BITS;
	// nil when off.
	Challenge challenge.Provider
	// ChallengeAttempts bounds an account's challenged attempts
	// (RATE_LIMIT_LOGIN_CHALLENGE_ATTEMPTS), per hour.
	ChallengeAttempts limiter.Budget
	// NetworkAttempts bounds the attempts of an IPv4 /24 or an IPv6 /48
	// (RATE_LIMIT_LOGIN_NETWORK_ATTEMPTS), per hour; an IPv6 /32 gets 16
	// times its limit (see [middleware.SignInOptions.NetworkAttempts]).
	NetworkAttempts limiter.Budget
}

// SendBudgets are the budgets of a send guard ([middleware.Send]), such as
// password resets, middleware's defaults where unset.
type SendBudgets struct {
	PerDestination limiter.Budget // RATE_LIMIT_RESET_PER_DESTINATION, per hour
	PerIP          limiter.Budget // RATE_LIMIT_RESET_PER_IP, per hour
}

// SignInOptions returns a sign-in guard's options with c's budgets, client
// address and device-cookie secret; the caller sets the rest.
func (c Config) SignInOptions() middleware.SignInOptions {
	return middleware.SignInOptions{
		AccountIPFailures:   c.SignIn.AccountIPFailures,
		AccountFailures:     c.SignIn.AccountFailures,
		IPAttempts:          c.SignIn.IPAttempts,
		NetworkAttempts:     c.SignIn.NetworkAttempts,
		ConsecutiveFailures: c.SignIn.ConsecutiveFailures,
		Delay:               middleware.Delay{After: c.SignIn.DelayAfter},
		Spray:               c.SignIn.Spray,
		Challenge:           c.SignIn.Challenge,
		ChallengeBudget:     c.SignIn.ChallengeAttempts,
		IP:                  c.IP(),
		Device:              middleware.DeviceOptions{Secret: c.Secret},
	}
}

// SendOptions returns a send guard's options with c's budgets and client
// address; the caller sets the rest.
func (c Config) SendOptions() middleware.SendOptions {
	return middleware.SendOptions{
		PerDestination: c.Send.PerDestination,
		PerIP:          c.Send.PerIP,
		IP:             c.IP(),
	}
}

// IP returns the client-address settings of TRUSTED_PROXIES and
// TRUSTED_PROXY_HEADER, for [keyfunc.NewIP] and every per-IP middleware.
func (c Config) IP() keyfunc.IPOptions {
	return keyfunc.IPOptions{TrustedProxies: c.TrustedProxies, Header: c.TrustedProxyHeader}
}

// ErrInvalid is matched by every error [Parse] returns for a bad value.
var ErrInvalid = errors.New("config: invalid setting")

// VarError is a bad value of one variable.
type VarError struct {
	Var   string // the variable
	Value string // its value, or "" when the trouble is its absence
	Want  string // what it expects
}

// Error names the variable and what it expects.
func (e *VarError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("%s: %s", e.Var, e.Want)
	}
	return fmt.Sprintf("%s=%q: want %s", e.Var, e.Value, e.Want)
}

// Is reports whether target is [ErrInvalid].
func (e *VarError) Is(target error) bool { return target == ErrInvalid }

// Parse reads the configuration through lookup (os.LookupEnv, say). It
// returns every bad value at once, joined, each a *[VarError].
func Parse(lookup func(string) (string, bool)) (Config, error) {
	r := reader{lookup: lookup}
	c := Config{
		DatabaseURL:    r.str("DATABASE_URL"),
		StoreURL:       r.str("RATE_LIMIT_STORE_URL"),
		SingleInstance: r.boolean("RATE_LIMIT_SINGLE_INSTANCE"),
		MaxEntries:     r.count("RATE_LIMIT_MAX_ENTRIES", 100_000_000),
		MaxQueued:      r.count("RATE_LIMIT_STORE_MAX_QUEUED", 1_000_000),
		MaxInFlight:    r.count("RATE_LIMIT_STORE_MAX_IN_FLIGHT", 100_000),
	}
	if s := r.str("TRUSTED_PROXIES"); s != "" {
		p, err := keyfunc.ParseNetworks(s)
		if err != nil {
			r.fail("TRUSTED_PROXIES", s, "a comma-separated list of CIDRs such as 10.0.0.0/8,2001:db8::/32 ("+err.Error()+")")
		}
		c.TrustedProxies = p
	}
	if s := r.str("TRUSTED_PROXY_HEADER"); s != "" {
		m, err := keyfunc.ParseHeaderMode(s)
		if err != nil {
			r.fail("TRUSTED_PROXY_HEADER", s, "X-Forwarded-For or Forwarded: the one forwarding header the trusted proxies set")
		}
		c.TrustedProxyHeader = m
	}
	c.RedisAllowEviction = r.boolean("RATE_LIMIT_REDIS_ALLOW_EVICTION")
	r.readTraffic(&c) // shadow, exemptions and blocks
	c.RedisURL = r.str("REDIS_URL")
	c.Store = r.kind(c.DatabaseURL, c.StoreURL, c.RedisURL)
	if secret := r.str("GATECOUNT_SECRET"); secret != "" {
		if len(secret) < keyhash.MinSecretLen {
			r.fail("GATECOUNT_SECRET", "(hidden)", fmt.Sprintf("at least %d bytes; %s", keyhash.MinSecretLen, keyhash.HowToMakeSecret))
		}
		c.Secret = []byte(secret)
	} else if c.Store != Memory && c.Store != "" {
		r.fail("GATECOUNT_SECRET", "", fmt.Sprintf("required by the %s store, which keeps keys only as HMACs under it: at least %d bytes; %s", c.Store, keyhash.MinSecretLen, keyhash.HowToMakeSecret))
	}
	secret := c.Secret
	if len(secret) < keyhash.MinSecretLen {
		secret = nil // refused above
	}
	c.SignIn, c.Send = r.signIn(secret), r.send()
	return c, errors.Join(r.errs...)
}

// Vars reads an app's own variables, such as the budgets of its routes,
// with [Parse]'s checks. A bad value is a *[VarError] matching
// [ErrInvalid], and [Vars.Err] returns every one at once.
//
//	v := config.NewVars(os.LookupEnv)
//	api := v.Budget("API_PER_MINUTE", limiter.Budget{Limit: 30, Window: time.Minute})
//	if err := v.Err(); err != nil {
//		log.Fatal(err)
//	}
type Vars struct{ r reader }

// NewVars returns a Vars reading through lookup (os.LookupEnv, say).
func NewVars(lookup func(string) (string, bool)) *Vars {
	return &Vars{r: reader{lookup: lookup}}
}

// Budget returns the budget of def's window that the variable name sets.
// Its value is the limit, a whole number from 1 to [limiter.MaxLimit],
// optionally followed by the algorithm. It reads as 5, 5,sliding, 5,bucket
// or 5,bucket:20 (see docs/budgets.md, "How a budget counts"). A limit alone counts
// by a fixed window, whatever def's algorithm. It returns def when the
// variable is unset.
func (v *Vars) Budget(name string, def limiter.Budget) limiter.Budget {
	return v.r.budget(name, def)
}

// Err returns every bad value read so far, joined, each a *[VarError]; nil
// when there is none.
func (v *Vars) Err() error { return errors.Join(v.r.errs...) }

type reader struct {
	lookup func(string) (string, bool)
	errs   []error
}

func (r *reader) fail(name, value, want string) {
	r.errs = append(r.errs, &VarError{Var: name, Value: value, Want: want})
}

func (r *reader) str(name string) string {
	v, _ := r.lookup(name)
	return strings.TrimSpace(v)
}

func (r *reader) count(name string, most int) int {
	v := r.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		r.fail(name, v, fmt.Sprintf("a whole number from 1 to %d", most))
		return 0
	}
	return n
}

func (r *reader) budget(name string, def limiter.Budget) limiter.Budget {
	v := r.str(name)
	if v == "" {
		return def
	}
	b, err := parseBudget(v, def)
	if err != nil {
		r.fail(name, v, err.Error())
	}
	return b
}

func (r *reader) boolean(name string) bool {
	v := r.str(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, v, "true or false")
	}
	return b
}

// kind resolves the store from RATE_LIMIT_STORE and the URLs. A URL is
// checked only when it takes part in the choice: one RATE_LIMIT_STORE does
// not choose may serve the app for other things.
func (r *reader) kind(dbURL, storeURL, redisURL string) Kind {
	redisVar := "RATE_LIMIT_STORE_URL"
	if storeURL == "" && redisURL != "" {
		redisVar, storeURL = "REDIS_URL", redisURL
	}
	database := func() Kind {
		switch {
		case strings.HasPrefix(dbURL, "postgres://"), strings.HasPrefix(dbURL, "postgresql://"):
			return Postgres
		case strings.HasPrefix(dbURL, "sqlite:"), strings.HasPrefix(dbURL, "file:"):
			return SQLite
		}
		r.fail("DATABASE_URL", storekit.RedactURL(dbURL), "a postgres://, postgresql://, sqlite: or file: URL")
		return ""
	}
	redis := func() Kind {
		if !strings.HasPrefix(storeURL, "redis://") && !strings.HasPrefix(storeURL, "rediss://") {
			r.fail(redisVar, storekit.RedactURL(storeURL), "a redis:// or rediss:// URL")
		}
		return Redis
	}
	switch v := strings.ToLower(r.str("RATE_LIMIT_STORE")); v {
	case "":
		switch {
		case storeURL != "" && dbURL != "":
			r.fail("RATE_LIMIT_STORE", "", fmt.Sprintf("database or redis, to choose between DATABASE_URL and %s, which are both set", redisVar))
			return ""
		case storeURL != "":
			return redis()
		case dbURL != "":
			return database()
		}
		return Memory
	case "memory":
		return Memory
	case "database":
		if dbURL == "" {
			r.fail("RATE_LIMIT_STORE", v, "DATABASE_URL to be set when it is database")
			return ""
		}
		return database()
	case "redis":
		if storeURL == "" {
			r.fail("RATE_LIMIT_STORE", v, "RATE_LIMIT_STORE_URL or REDIS_URL to be set when it is redis")
			return ""
		}
		return redis()
	default:
		r.fail("RATE_LIMIT_STORE", v, "memory, database or redis")
		return ""
	}
}
