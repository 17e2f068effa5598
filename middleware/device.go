package middleware

import (
	"cmp"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware/internal/derive"
)

// Defaults of [DeviceOptions].
const (
	// DefaultDeviceCookie names the device cookie when it is Secure with
	// Path "/", as it is by default. Browsers take a __Host- cookie only
	// from its own host over HTTPS, never from a sibling subdomain.
	DefaultDeviceCookie = "__Host-gatecount-device"
	// PlainDeviceCookie names the device cookie when the __Host- prefix is
	// ruled out: Insecure, or a Path other than "/". A guard that sets
	// [DefaultDeviceCookie] never reads it: other hosts of the site can set
	// it, and so toss cookies that would hide the owner's.
	PlainDeviceCookie = "gatecount-device"
	// MaxDeviceCookies bounds the device cookies of a request that are
	// tried, of the one name read. A request carrying more is taken as
	// carrying none, whatever their order, so fewer planted cookies never
	// hide a valid one, and a request costs at most this many MACs.
	MaxDeviceCookies = 32
	// MaxDeviceLifetime bounds DeviceOptions.Lifetime: a recovery revokes
	// the tokens issued before it for [limiter.MaxWindow], and browsers keep
	// no cookie longer than 400 days.
	MaxDeviceLifetime = limiter.MaxWindow
)

// Defaults of [DeviceOptions]: how long a device token stays valid after
// the sign-in that issued it, and the failures budget of one known device.
var (
	defaultDeviceLifetime = 30 * 24 * time.Hour
	defaultDeviceFailures = limiter.Budget{Limit: 5, Window: 15 * time.Minute}
)

// withDefaults returns o with its lifetime and failures budget set to their
// defaults when zero.
func (o DeviceOptions) withDefaults() DeviceOptions {
	o.Lifetime = cmp.Or(o.Lifetime, defaultDeviceLifetime)
	o.Failures = cmp.Or(o.Failures, defaultDeviceFailures)
	return o
}

// DeviceOptions configure the device cookies of [SignIn], after OWASP's
// "device cookies" against slow brute force. After a successful sign-in the
// guard gives the client a token that binds it to the account. An attempt
// presenting a valid token for the account it names is counted against that
// device's own budgets only: its failures, and its consecutive failures up
// to the guard's ConsecutiveFailures. Strangers' failures on the account or
// on the client's address so never lock it out. The zero value turns them
// on with the defaults.
type DeviceOptions struct {
	// Off turns device cookies off: every attempt counts against the
	// account and address budgets.
	Off bool
	// Cookie names the cookie. "" means [DefaultDeviceCookie], or
	// [PlainDeviceCookie] when Insecure or Path rules out the __Host- prefix.
	// A name set here is kept as written and is the only one read. A
	// __Host- name needs Path "/" and Secure, a __Secure- name Secure:
	// browsers drop such cookies otherwise, so construction refuses them.
	Cookie string
	// Lifetime is how long a token is valid after the sign-in that issued
	// it (each successful sign-in issues a new one); zero means 30 days, at
	// most [MaxDeviceLifetime].
	Lifetime time.Duration
	// Failures bounds the failed attempts of one device on its account;
	// zero means 5 per 15 minutes.
	Failures limiter.Budget
	// Secret signs the tokens: at least keyhash.MinSecretLen bytes, the
	// same on every instance of the app (GATECOUNT_SECRET). The signing key
	// is derived from it, so the same secret may key a store. It keys the
	// password count too (see [SprayOptions]). Nil means a random key of
	// this process: tokens stop working when it restarts. On a shared
	// store, where other instances would refuse them, [SignIn] then fails
	// with [ErrNoSecret].
	Secret []byte
	// Insecure leaves out the cookie's Secure attribute, for development
	// over plain HTTP. Never set it in production: the token would travel
	// in clear.
	Insecure bool
	// Path is the cookie's Path; "" means "/". Any other Path rules out
	// the __Host- prefix, so the default name is then [PlainDeviceCookie],
	// which other hosts of the site can set and so plant.
	Path string
}

// device token layout: version, issue time (unix milliseconds), nonce, MAC.
// Version 1, which earlier releases issued, held the expiry in unix seconds
// instead.
const (
	deviceVersion = 2
	deviceNonce   = 16
	deviceMAC     = sha256.Size
	deviceBytes   = 1 + 8 + deviceNonce + deviceMAC
)

// devices signs and verifies device tokens. A token is base64url(version ‖
// issued ‖ nonce ‖ HMAC-SHA256(key, version ‖ issued ‖ nonce ‖ account)).
// The account is never in it, only bound by the MAC, so a token verifies
// only for the account it was issued for.
type devices struct {
	o   DeviceOptions
	key []byte
	now func() time.Time
}

// deviceKeyLabel separates the device-cookie key derived from a secret from
// every other use of that secret.
const deviceKeyLabel = "gatecount device cookie key v1"

func newDevices(o DeviceOptions) (*devices, error) {
	if o.Path == "" {
		o.Path = "/"
	}
	switch {
	case o.Cookie != "":
	case o.Insecure || o.Path != "/":
		o.Cookie = PlainDeviceCookie
	default:
		o.Cookie = DefaultDeviceCookie
	}
	if !isCookieName(o.Cookie) {
		return nil, fmt.Errorf("middleware: device cookie name %q is not a cookie name", o.Cookie)
	}
	if err := checkCookiePrefix(o); err != nil {
		return nil, err
	}
	o = o.withDefaults()
	if o.Lifetime < time.Minute || o.Lifetime > MaxDeviceLifetime {
		return nil, fmt.Errorf("middleware: device lifetime %v must be from 1m to %v", o.Lifetime, MaxDeviceLifetime)
	}
	key, err := derive.Key(o.Secret, deviceKeyLabel)
	if err != nil {
		return nil, fmt.Errorf("middleware: device %w", err)
	}
	return &devices{o: o, key: key, now: time.Now}, nil
}

// checkCookiePrefix refuses a cookie name whose prefix o's attributes break:
// browsers drop a __Host- cookie unless it is Secure with Path "/", and a
// __Secure- cookie unless it is Secure. Prefixes match in any case, as
// browsers match them.
func checkCookiePrefix(o DeviceOptions) error {
	var prefix string
	switch {
	case hasPrefixFold(o.Cookie, "__Host-"):
		prefix = "__Host-"
	case hasPrefixFold(o.Cookie, "__Secure-"):
		prefix = "__Secure-"
	default:
		return nil
	}
	if o.Insecure {
		return fmt.Errorf("middleware: device cookie %q: its %s prefix needs Secure, which Insecure leaves out; turn Insecure off or drop the prefix", o.Cookie, prefix)
	}
	if prefix == "__Host-" && o.Path != "/" {
		return fmt.Errorf("middleware: device cookie %q: its __Host- prefix needs Path \"/\", not %q; leave Path empty or drop the prefix", o.Cookie, o.Path)
	}
	return nil
}

// hasPrefixFold reports whether s begins with prefix, in any case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// isCookieName reports whether s is a token, as a cookie name must be.
func isCookieName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || isSeparator(c) {
			return false
		}
	}
	return true
}

func isSeparator(c byte) bool {
	switch c {
	case '(', ')', '<', '>', '@', ',', ';', ':', '\\', '"', '/', '[', ']', '?', '=', '{', '}':
		return true
	}
	return false
}

// mac returns the MAC of a token's first bytes for account.
func (v *devices) mac(head []byte, account string) []byte {
	m := hmac.New(sha256.New, v.key)
	m.Write(head)
	m.Write([]byte(account))
	return m.Sum(nil)
}

// sign returns a new token for account and when it expires.
func (v *devices) sign(account string) (string, time.Time) {
	issued := v.now().Truncate(time.Millisecond)
	b := make([]byte, deviceBytes)
	b[0] = deviceVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(issued.UnixMilli()))
	rand.Read(b[9 : 9+deviceNonce])
	copy(b[9+deviceNonce:], v.mac(b[:9+deviceNonce], account))
	return base64.RawURLEncoding.EncodeToString(b), issued.Add(v.o.Lifetime)
}

// A device is a valid token's device ID (its nonce, in hex) and when it
// was issued: the zero Time for a version 1 token, whose issue is unknown,
// so that it predates every recovery.
type device struct {
	id     string
	issued time.Time
}

// verify returns the device of token when it is valid for account now:
// well-formed, signed under v's key for that account, and not expired.
func (v *devices) verify(token, account string) (device, bool) {
	if base64.RawURLEncoding.DecodedLen(len(token)) != deviceBytes {
		return device{}, false
	}
	var b [deviceBytes]byte
	n, err := base64.RawURLEncoding.Decode(b[:], []byte(token))
	if err != nil || n != deviceBytes || (b[0] != deviceVersion && b[0] != 1) {
		return device{}, false
	}
	if !hmac.Equal(b[9+deviceNonce:], v.mac(b[:9+deviceNonce], account)) {
		return device{}, false
	}
	t := int64(binary.BigEndian.Uint64(b[1:9]))
	d := device{id: hex.EncodeToString(b[9 : 9+deviceNonce])}
	exp := time.Unix(t, 0) // version 1: the expiry
	if b[0] == deviceVersion {
		d.issued = time.UnixMilli(t)
		exp = d.issued.Add(v.o.Lifetime)
	}
	if !v.now().Before(exp) {
		return device{}, false
	}
	return d, true
}

// known returns the device of the first valid token for account among r's
// cookies of v's name. A request with more than MaxDeviceCookies of them
// has none: none is tried.
func (v *devices) known(r *http.Request, account string) (device, bool) {
	cs := r.CookiesNamed(v.o.Cookie)
	if len(cs) > MaxDeviceCookies {
		return device{}, false
	}
	for _, c := range cs {
		if d, ok := v.verify(c.Value, account); ok {
			return d, true
		}
	}
	return device{}, false
}

// issue adds a new token for account to h as a Set-Cookie field.
func (v *devices) issue(h http.Header, account string) {
	token, exp := v.sign(account)
	c := &http.Cookie{
		Name:     v.o.Cookie,
		Value:    token,
		Path:     v.o.Path,
		Expires:  exp,
		MaxAge:   int(v.o.Lifetime / time.Second),
		HttpOnly: true,
		Secure:   !v.o.Insecure,
		SameSite: http.SameSiteLaxMode,
	}
	h.Add("Set-Cookie", c.String())
}
