package keyfunc

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/cases"
	"golang.org/x/text/secure/precis"
	"golang.org/x/text/unicode/norm"
)

// Bounds on account names, in bytes.
const (
	// maxAccountInput is the longest account value, in bytes as sent,
	// surrounding white space included. It is the longest input a Normalize
	// function processes, and the default bound of a body field value
	// (DefaultMaxValueBytes). One number for both, so that a value the
	// body reader refuses as too long is never one a handler's own
	// normalisation would accept, or the other way round.
	maxAccountInput = 256
	// maxUsername is the longest normalised user name.
	maxUsername = 256
	// maxEmail is the longest normalised e-mail address (RFC 5321's path
	// limit less the angle brackets).
	maxEmail = 254
	// maxEmailLocal is the longest local part of a normalised address.
	maxEmailLocal = 64
)

// Digit bounds of NormalizePhone, from E.164 (at most 15 digits) and the
// shortest national numbers in use.
const (
	minPhoneDigits = 7
	maxPhoneDigits = 15
)

func invalidAccount(kind, why string) error {
	return fmt.Errorf("keyfunc: %s: %s: %w", kind, why, ErrInvalidAccount)
}

// trimAccount checks the input bound and trims surrounding white space.
func trimAccount(kind, s string) (string, error) {
	if len(s) > maxAccountInput {
		return "", invalidAccount(kind, fmt.Sprintf("longer than %d bytes", maxAccountInput))
	}
	s = strings.TrimSpace(s)
	if s == "" {
		return "", invalidAccount(kind, "empty")
	}
	if !utf8.ValidString(s) {
		return "", invalidAccount(kind, "not UTF-8")
	}
	return s, nil
}

// NormalizeUsername returns the canonical form of a user name. Surrounding
// white space is trimmed, then the RFC 8265 UsernameCaseMapped profile is
// applied. The profile maps widths, lower-cases, applies NFC, and rejects
// spaces, control and other disallowed characters. So " Alice" and "ＡＬＩＣＥ"
// both give "alice". The result is at most 256 bytes, and
// normalising it again gives it back unchanged. Rejected names give an
// error matching [ErrInvalidAccount].
func NormalizeUsername(s string) (string, error) {
	const kind = "user name"
	s, err := trimAccount(kind, s)
	if err != nil {
		return "", err
	}
	out, err := precis.UsernameCaseMapped.String(s)
	if err != nil {
		return "", fmt.Errorf("keyfunc: %s: %w: %w", kind, ErrInvalidAccount, err)
	}
	if out == "" {
		return "", invalidAccount(kind, "empty")
	}
	if len(out) > maxUsername {
		return "", invalidAccount(kind, fmt.Sprintf("longer than %d bytes", maxUsername))
	}
	return out, nil
}

// foldNFKC applies NFKC, Unicode case folding and NFKC again until the
// result is stable, so that the mapping is idempotent.
func foldNFKC(s string) (string, bool) {
	fold := cases.Fold() // a Caser is stateful: one per call
	for range 4 {
		t := norm.NFKC.String(fold.String(norm.NFKC.String(s)))
		if t == s {
			return t, true
		}
		s = t
	}
	return "", false
}

// NormalizeEmail returns the canonical form of an e-mail address, for use as
// a rate-limit key. The rule is:
//
//  1. trim surrounding white space;
//  2. apply Unicode NFKC and full case folding to the whole address, local
//     part included. Mail systems treat local parts case-insensitively in
//     practice, and for a limiter merging spellings is the safe direction;
//  3. require exactly one '@', a non-empty local part of at most
//     64 bytes, and a domain of non-empty dot-separated labels;
//     reject white space and control characters anywhere;
//  4. require at most 254 bytes in all.
//
// So "Alice@Example.COM " and "alice@example.com" give the same key.
// NormalizeEmail is not an address validator and does not rewrite what
// only some providers treat as equivalent: "+tag" suffixes and dots in the
// local part are kept. Quoted local parts containing '@' or spaces are
// rejected. Internationalised domains are case-folded but not converted to
// ASCII (IDNA), so a U-label and its "xn--" A-label give different keys.
// The result normalises to itself. Rejected addresses give an error matching
// [ErrInvalidAccount].
func NormalizeEmail(s string) (string, error) {
	const kind = "e-mail address"
	s, err := trimAccount(kind, s)
	if err != nil {
		return "", err
	}
	s, ok := foldNFKC(s)
	if !ok {
		return "", invalidAccount(kind, "unstable under case folding")
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return "", invalidAccount(kind, "contains white space or control characters")
	}
	local, domain, ok := strings.Cut(s, "@")
	switch {
	case !ok:
		return "", invalidAccount(kind, "no '@'")
	case strings.Contains(domain, "@"):
		return "", invalidAccount(kind, "more than one '@'")
	case local == "":
		return "", invalidAccount(kind, "empty local part")
	case len(local) > maxEmailLocal:
		return "", invalidAccount(kind, fmt.Sprintf("local part longer than %d bytes", maxEmailLocal))
	case domain == "":
		return "", invalidAccount(kind, "empty domain")
	case len(s) > maxEmail:
		return "", invalidAccount(kind, fmt.Sprintf("longer than %d bytes", maxEmail))
	}
	for label := range strings.SplitSeq(domain, ".") {
		if label == "" {
			return "", invalidAccount(kind, "empty domain label")
		}
	}
	return s, nil
}

// NormalizePhone returns the canonical form of a telephone number. It trims
// it and applies NFKC, which turns full-width digits into ASCII. Then
// spaces, tabs, '-', '.', '(' and ')' are removed. What is left must be an
// optional leading '+' followed by 7 to 15
// ASCII digits. The '+' is kept, so "+1 (415) 555-0100" gives
// "+14155550100". A number without it is keyed as written: NormalizePhone
// knows no country rules, and does not turn national numbers into E.164.
// Any other character gives an error matching [ErrInvalidAccount], as does
// a digit count out of bounds. The result normalises to itself.
func NormalizePhone(s string) (string, error) {
	const kind = "phone number"
	s, err := trimAccount(kind, s)
	if err != nil {
		return "", err
	}
	s = norm.NFKC.String(s)
	b := make([]byte, 0, maxPhoneDigits+1)
	digits := 0
	for _, r := range s {
		switch {
		case '0' <= r && r <= '9':
			digits++
			if digits > maxPhoneDigits {
				return "", invalidAccount(kind, fmt.Sprintf("more than %d digits", maxPhoneDigits))
			}
			b = append(b, byte(r))
		case r == '+':
			if len(b) > 0 {
				return "", invalidAccount(kind, "'+' after the start")
			}
			b = append(b, '+')
		case r == ' ' || r == '\t' || r == '-' || r == '.' || r == '(' || r == ')':
		default:
			return "", invalidAccount(kind, fmt.Sprintf("character %q not allowed", r))
		}
	}
	if digits < minPhoneDigits {
		return "", invalidAccount(kind, fmt.Sprintf("fewer than %d digits", minPhoneDigits))
	}
	return string(b), nil
}
