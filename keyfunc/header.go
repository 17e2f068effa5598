package keyfunc

import (
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
)

// maxHeaderValue is the longest header value, in bytes after trimming white
// space, that [Header] accepts as a key.
const maxHeaderValue = 256

// Header returns a Func keyed by the value of the request header name, with
// surrounding white space trimmed. It fails with an error matching
// [ErrNoKey] when the header is absent, empty, or present on more than one
// line (which value counts would be ambiguous). It fails with
// [ErrValueTooLong] when the value exceeds 256 bytes.
//
// The client chooses header values freely. A header key so only limits
// anything when the value is checked elsewhere (an API key that the
// authentication layer verifies, for example), or is combined with another
// key by [Join]. An invalid header name gives a Func that always fails with
// [ErrInvalidOption].
func Header(name string) Func {
	if name == "" || strings.IndexFunc(name, func(c rune) bool { return c > 0x7f || !isTchar(byte(c)) }) >= 0 {
		return misconfigured(fmt.Sprintf("invalid header name %q", name))
	}
	canon := textproto.CanonicalMIMEHeaderKey(name)
	return func(r *http.Request) (string, error) {
		vs := r.Header[canon]
		switch len(vs) {
		case 0:
			return "", fmt.Errorf("keyfunc: header %s absent: %w", canon, ErrNoKey)
		case 1:
		default:
			return "", fmt.Errorf("keyfunc: header %s repeated %d times: %w", canon, len(vs), ErrNoKey)
		}
		v := strings.Trim(vs[0], " \t")
		if v == "" {
			return "", fmt.Errorf("keyfunc: header %s empty: %w", canon, ErrNoKey)
		}
		if len(v) > maxHeaderValue {
			return "", fmt.Errorf("keyfunc: header %s has %d bytes, over %d: %w", canon, len(v), maxHeaderValue, ErrValueTooLong)
		}
		return v, nil
	}
}
