// Package keyhash turns a handle's prefix and a key into the name a shared
// store keeps it under. The name is an HMAC-SHA-256 under the app's secret.
// So no store ever holds a key (an account name, an address) in clear. Rows
// written under one secret can also be told from rows written under
// another.
package keyhash

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"
)

// MinSecretLen is the shortest secret accepted, in bytes.
const MinSecretLen = 32

// ErrWeakSecret is returned for a secret shorter than [MinSecretLen].
var ErrWeakSecret = errors.New("keyhash: secret too short")

// HowToMakeSecret says how to make a good secret, for error messages.
const HowToMakeSecret = "make one with: openssl rand -base64 48"

// Hasher names keys under one secret. It is safe for concurrent use.
type Hasher struct {
	fingerprint string
	pool        sync.Pool
}

// New returns a Hasher for secret, which must be at least [MinSecretLen] bytes.
func New(secret []byte) (*Hasher, error) {
	if len(secret) < MinSecretLen {
		return nil, fmt.Errorf("%w: %d bytes, want at least %d (%s)", ErrWeakSecret, len(secret), MinSecretLen, HowToMakeSecret)
	}
	key := append([]byte(nil), secret...)
	h := &Hasher{}
	h.pool.New = func() any { return &summer{m: hmac.New(sha256.New, key)} }
	fp := hmac.New(sha256.New, key)
	fp.Write([]byte("gatecount secret fingerprint"))
	h.fingerprint = hex.EncodeToString(fp.Sum(nil)[:8])
	return h, nil
}

// Fingerprint names the secret in 16 hexadecimal digits, from which the
// secret cannot be recovered. Stores record it beside every entry.
func (h *Hasher) Fingerprint() string { return h.fingerprint }

// Sum returns the name of key under prefix. It is the HMAC-SHA-256, under
// the secret, of the prefix's length, the prefix and the key, so that no
// two (prefix, key) pairs share a name.
func (h *Hasher) Sum(prefix, key string) [sha256.Size]byte {
	s := h.pool.Get().(*summer)
	out := s.sum(prefix, key)
	h.pool.Put(s)
	return out
}

// summer is one HMAC and the scratch its input and output pass through, so
// that Sum allocates nothing once the pool is warm.
type summer struct {
	m   hash.Hash
	buf []byte
}

func (s *summer) sum(prefix, key string) [sha256.Size]byte {
	s.m.Reset()
	b := binary.BigEndian.AppendUint64(s.buf[:0], uint64(len(prefix)))
	b = append(append(b, prefix...), key...)
	s.m.Write(b)
	b = s.m.Sum(b[:0])
	var out [sha256.Size]byte
	copy(out[:], b)
	s.buf = b
	return out
}
