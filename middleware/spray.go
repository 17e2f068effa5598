package middleware

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/text/unicode/norm"

	"github.com/gatecount/gatecount/keyfunc"
	"github.com/gatecount/gatecount/limiter"
	"github.com/gatecount/gatecount/middleware/internal/derive"
)

// defaultPasswordSpray is the budget of distinct accounts one password may
// fail against, from all clients, before it is refused for everyone.
var defaultPasswordSpray = limiter.Budget{Limit: 20, Window: time.Hour}

// PasswordBuckets is how many spray counters all passwords share. A
// password is counted under a key of 16 bits, which every one of 65,536
// passwords shares, so that no stored key tells a password apart.
const PasswordBuckets = 1 << 16

// SprayOptions configure [SignIn]'s count of failures per password, against
// password spraying: one password tried on many accounts, each from its
// own address, which no account or address budget sees. The zero value
// turns it on with the defaults.
type SprayOptions struct {
	// Off turns the count off.
	Off bool
	// Field is the body field holding the password; "" means "password".
	// It is read with the account, in the same
	// reading of the body. A request without it, or with it empty, is not
	// counted per password; one with it given twice is unreadable (see
	// SignInOptions.Failed). One with it in the query string, in any
	// letter case, is answered 400 with nothing counted, the count on or
	// off: a password in a URL leaks into logs, proxies and histories.
	Field string
	// Budget bounds the distinct accounts a password may fail against in
	// its window; zero means 20 per hour.
	Budget limiter.Budget
	// Normalize turns a password into the form the count reads, so that
	// variants the app's check takes alike count as one. Nil means
	// Unicode NFKC, as NIST SP 800-63B recommends: a password in fullwidth
	// letters counts as in ASCII. An app that checks passwords as sent may
	// give the identity; one with its own normalisation gives that.
	Normalize func(string) string
}

// withDefaults returns o with its field and budget set to their defaults
// when zero.
func (o SprayOptions) withDefaults() SprayOptions {
	o.Field = cmp.Or(o.Field, "password")
	o.Budget = cmp.Or(o.Budget, defaultPasswordSpray)
	return o
}

// sprayKeyLabel separates the password key derived from a secret from
// every other use of that secret.
const sprayKeyLabel = "gatecount password spray key v1"

// sprayer names the spray counters of passwords.
type sprayer struct {
	o    SprayOptions
	macs sync.Pool // of HMACs under the spray key
}

// newSprayer checks o and derives its key from secret (see
// DeviceOptions.Secret). A nil secret gives a random key of this process,
// never one an attacker could compute, so that no offline twin of a
// password shares its bucket by design.
func newSprayer(o SprayOptions, account string, secret []byte) (*sprayer, error) {
	o = o.withDefaults()
	if o.Normalize == nil {
		o.Normalize = norm.NFKC.String
	}
	if strings.EqualFold(o.Field, account) {
		return nil, fmt.Errorf("middleware: password field %q is the account field", o.Field)
	}
	if err := o.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("middleware: password spray budget: %w", err)
	}
	key, err := derive.Key(secret, sprayKeyLabel)
	if err != nil {
		return nil, fmt.Errorf("middleware: password spray: %w", err)
	}
	s := &sprayer{o: o}
	s.macs.New = func() any { return hmac.New(sha256.New, key) }
	return s, nil
}

// bucket returns the bucket of password, normalised: HMAC-SHA-256 under
// the spray key, truncated to 16 bits.
func (s *sprayer) bucket(password string) uint16 {
	m := s.macs.Get().(hash.Hash)
	m.Reset()
	m.Write([]byte(s.o.Normalize(password)))
	var sum [sha256.Size]byte
	b := binary.BigEndian.Uint16(m.Sum(sum[:0]))
	s.macs.Put(m)
	return b
}

// keys returns the keys an attempt with password on account charges. They
// are the password's bucket, ("password", H), and the marker of the pair,
// ("password-account", H, ACCOUNT). The marker tells a pair counted once
// from a new one.
func (s *sprayer) keys(password, account string) (spray, marker string) {
	h := bucketName(s.bucket(password))
	return keyfunc.JoinKeys("password", h), keyfunc.JoinKeys("password-account", h, account)
}

// bucketName writes a bucket as four hexadecimal digits.
func bucketName(b uint16) string {
	s := strconv.FormatUint(uint64(b), 16)
	return strings.Repeat("0", 4-len(s)) + s
}

// sprayMarker is the budget a marker is charged with: it counts, and never
// refuses.
func sprayMarker(b limiter.Budget) limiter.Budget {
	return limiter.Budget{Limit: limiter.MaxLimit, Window: b.Window}
}
