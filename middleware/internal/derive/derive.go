// Package derive derives the keys of the guards from the secret they
// share: each use its own key, apart from every other.
package derive

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"fmt"

	"github.com/gatecount/gatecount/store/keyhash"
)

// Key returns the key for label derived from secret, or a random key of
// this process when secret is nil. A secret shorter than
// keyhash.MinSecretLen is an error.
func Key(secret []byte, label string) ([]byte, error) {
	if secret == nil {
		secret = make([]byte, 32)
		rand.Read(secret)
	} else if len(secret) < keyhash.MinSecretLen {
		return nil, fmt.Errorf("secret of %d bytes, want at least %d (%s)", len(secret), keyhash.MinSecretLen, keyhash.HowToMakeSecret)
	}
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(label))
	return m.Sum(nil), nil
}
