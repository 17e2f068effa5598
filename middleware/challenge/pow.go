package challenge

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gatecount/gatecount/middleware/internal/derive"
)

// MaxBits bounds the difficulty of a puzzle.
const MaxBits = 40

// Defaults of [ProofOfWorkOptions].
const (
	// defaultBits is the base difficulty, chosen for the served script on
	// a phone (middleware/DESIGN.md gives its cost).
	defaultBits = 17
	// defaultExtraBits is how far the difficulty grows with an account's
	// challenged failures, by default: one bit each.
	defaultExtraBits = 12
	// defaultLifetime is how long a puzzle may be answered.
	defaultLifetime = 5 * time.Minute
)

// ProofOfWorkScheme is the Scheme of [ProofOfWork]'s challenges.
const ProofOfWorkScheme = "pow"

// ProofOfWorkOptions configure [NewProofOfWork]. The zero value gives the
// defaults, with a key of this process.
type ProofOfWorkOptions struct {
	// Secret signs the puzzles: at least 32 bytes, the
	// same on every instance (GATECOUNT_SECRET). The puzzle key is derived
	// from it apart from every other use. Nil means a random key of this
	// process: a puzzle is then answered only on the instance that issued
	// it. On a shared store, middleware.SignIn then fails with
	// middleware.ErrNoSecret.
	Secret []byte
	// Bits is the difficulty of a puzzle for an account with no challenged
	// failures: the leading zero bits of its answer's SHA-256. Zero means
	// 17, chosen for the served script on a phone.
	Bits int
	// MaxBits caps the difficulty, which grows by a bit with each
	// challenged failure; zero means Bits + 12. At most [MaxBits].
	MaxBits int
	// Lifetime is how long a puzzle may be answered, from 1s to 1h; zero
	// means 5 minutes.
	Lifetime time.Duration
}

// ProofOfWork is a [Provider] that needs no third party: the client finds a
// counter whose hash with the puzzle has enough leading zero bits. A
// puzzle is stateless, signed with its expiry and difficulty, and bound to
// the account and the client address it was issued for.
//
// A puzzle's token is base64url(version ‖ expiry ‖ bits ‖ nonce ‖
// HMAC-SHA256(key, version ‖ expiry ‖ bits ‖ nonce ‖ len(account) ‖
// account ‖ address)). Its answer is the token, a dot and a decimal
// counter, such that the SHA-256 of the answer's bytes starts with bits
// zero bits. [Solve] and the script of [ProofOfWork.Script] find
// it the same way.
type ProofOfWork struct {
	o   ProofOfWorkOptions
	key []byte
	now func() time.Time
}

// puzzle token layout: version, expiry (unix seconds), bits, nonce, MAC.
const (
	puzzleVersion = 1
	puzzleNonce   = 16
	puzzleHead    = 1 + 8 + 1 + puzzleNonce
	puzzleBytes   = puzzleHead + sha256.Size
	// puzzleToken is the length of a token, in base64url.
	puzzleToken = (puzzleBytes*8 + 5) / 6
	// maxCounter is the most digits of an answer's counter.
	maxCounter = 20
)

// puzzleKeyLabel separates the puzzle key derived from a secret from every
// other use of that secret.
const puzzleKeyLabel = "gatecount proof-of-work key v1"

// NewProofOfWork returns a proof of work configured by o.
func NewProofOfWork(o ProofOfWorkOptions) (*ProofOfWork, error) {
	if o.Bits == 0 {
		o.Bits = defaultBits
	}
	if o.MaxBits == 0 {
		o.MaxBits = min(o.Bits+defaultExtraBits, MaxBits)
	}
	if o.Lifetime == 0 {
		o.Lifetime = defaultLifetime
	}
	switch {
	case o.Bits < 1 || o.MaxBits < o.Bits || o.MaxBits > MaxBits:
		return nil, fmt.Errorf("challenge: proof of work of %d to %d bits, want 1 ≤ bits ≤ max bits ≤ %d", o.Bits, o.MaxBits, MaxBits)
	case o.Lifetime < time.Second || o.Lifetime > time.Hour || o.Lifetime%time.Second != 0:
		return nil, fmt.Errorf("challenge: puzzle lifetime %v, want whole seconds from 1s to 1h", o.Lifetime)
	}
	key, err := derive.Key(o.Secret, puzzleKeyLabel)
	if err != nil {
		return nil, fmt.Errorf("challenge: proof of work: %w", err)
	}
	return &ProofOfWork{o: o, key: key, now: time.Now}, nil
}

// Shared reports whether p's key is derived from a secret, so that every
// instance verifies its puzzles.
func (p *ProofOfWork) Shared() bool { return p.o.Secret != nil }

// Lifetime returns how long a puzzle may be answered.
func (p *ProofOfWork) Lifetime() time.Duration { return p.o.Lifetime }

// Bits returns the difficulty of a puzzle for an account with failures
// challenged failures: Bits plus one a failure, at most MaxBits.
func (p *ProofOfWork) Bits(failures int) int {
	return p.o.Bits + min(max(failures, 0), p.o.MaxBits-p.o.Bits)
}

// mac returns the MAC of a token's head for c.
func (p *ProofOfWork) mac(head []byte, c For) []byte {
	m := hmac.New(sha256.New, p.key)
	m.Write(head)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(c.Account)))
	m.Write(n[:])
	m.Write([]byte(c.Account))
	m.Write([]byte(c.Addr))
	return m.Sum(nil)
}

// Issue implements [Provider]: a new puzzle for c, of the difficulty
// Bits(c.Failures).
func (p *ProofOfWork) Issue(_ context.Context, c For) (Issued, error) {
	n := p.Bits(c.Failures)
	var b [puzzleBytes]byte
	b[0] = puzzleVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(p.now().Add(p.o.Lifetime).Unix()))
	b[9] = byte(n)
	rand.Read(b[10:puzzleHead])
	copy(b[puzzleHead:], p.mac(b[:puzzleHead], c))
	return Issued{Scheme: ProofOfWorkScheme, Token: base64.RawURLEncoding.EncodeToString(b[:]), Bits: n}, nil
}

// Verify implements [Provider]: it accepts an answer to a puzzle p issued
// for c that has not expired. The answer has the puzzle's leading zero bits,
// and those of the difficulty in force, Bits(c.Failures): a puzzle issued
// before others' failures is answered at their cost. It costs one SHA-256
// and one HMAC, and touches no store. Its error matches
// [ErrAnswer].
func (p *ProofOfWork) Verify(_ context.Context, answer string, c For) (Solved, error) {
	b, n, err := parseAnswer(answer)
	if err != nil {
		return Solved{}, err
	}
	n = max(n, p.Bits(c.Failures))
	if leadingZeros(sha256.Sum256([]byte(answer))) < n {
		return Solved{}, fmt.Errorf("%w: fewer than %d leading zero bits", ErrAnswer, n)
	}
	if !hmac.Equal(b[puzzleHead:], p.mac(b[:puzzleHead], c)) {
		return Solved{}, fmt.Errorf("%w: not a puzzle of this key, account and address", ErrAnswer)
	}
	exp := time.Unix(int64(binary.BigEndian.Uint64(b[1:9])), 0)
	if !p.now().Before(exp) {
		return Solved{}, fmt.Errorf("%w: puzzle expired", ErrAnswer)
	}
	return Solved{ID: hex.EncodeToString(b[10:puzzleHead]), Expires: exp}, nil
}

// parseAnswer returns the token bytes of an answer and its difficulty. It
// refuses anything but a well-formed token of this version, a dot, and 1
// to 20 decimal digits without a leading zero.
func parseAnswer(answer string) (b [puzzleBytes]byte, n int, err error) {
	token, counter, ok := strings.Cut(answer, ".")
	if !ok || len(token) != puzzleToken || len(counter) == 0 || len(counter) > maxCounter ||
		(len(counter) > 1 && counter[0] == '0') || strings.Trim(counter, "0123456789") != "" {
		return b, 0, fmt.Errorf("%w: malformed", ErrAnswer)
	}
	if _, err := strconv.ParseUint(counter, 10, 64); err != nil {
		return b, 0, fmt.Errorf("%w: malformed counter", ErrAnswer)
	}
	m, err := base64.RawURLEncoding.Strict().Decode(b[:], []byte(token))
	if err != nil || m != puzzleBytes || b[0] != puzzleVersion {
		return b, 0, fmt.Errorf("%w: malformed token", ErrAnswer)
	}
	n = int(b[9])
	if n < 1 || n > MaxBits {
		return b, 0, fmt.Errorf("%w: malformed difficulty", ErrAnswer)
	}
	return b, n, nil
}

// leadingZeros returns the leading zero bits of h.
func leadingZeros(h [sha256.Size]byte) int {
	n := 0
	for _, c := range h {
		if c != 0 {
			return n + bits.LeadingZeros8(c)
		}
		n += 8
	}
	return n
}

// Solve answers the proof-of-work puzzle token of difficulty bits as the
// served script does. It tries the counters 0, 1, 2, …, and returns the
// first answer token + "." + counter whose SHA-256 has bits leading zero
// bits. It also returns how many hashes it took. It stops with ctx,
// returning its error.
func Solve(ctx context.Context, token string, bits int) (answer string, hashes int, err error) {
	buf := make([]byte, 0, len(token)+1+maxCounter)
	buf = append(append(buf, token...), '.')
	for c := uint64(0); ; c++ {
		if c&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return "", int(c), err
			}
		}
		b := strconv.AppendUint(buf, c, 10)
		if leadingZeros(sha256.Sum256(b)) >= bits {
			return string(b), int(c + 1), nil
		}
	}
}

// Script returns a handler serving the JavaScript that solves puzzles in
// the browser, as [Solve] does. It has a compact SHA-256 of its
// own: crypto.subtle needs a secure context, and costs a promise per hash.
// It defines gatecountSolve(token, bits), which returns {answer, hashes}.
func (p *ProofOfWork) Script() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Type", "text/javascript; charset=utf-8")
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("X-Content-Type-Options", "nosniff")
		w.Write(powScript)
	})
}

//go:embed pow.js
var powScript []byte
