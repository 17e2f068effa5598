package store

import (
	"context"
	"errors"
	"fmt"
)

// ErrSecretMismatch is matched by the error of CheckSecret when the store
// holds live entries under another secret and none under its own.
var ErrSecretMismatch = errors.New("store: the secret matches none of the store's live entries")

// Secrets is implemented by backends that name entries under a secret (see
// package keyhash). Fingerprint names the backend's own secret. Secrets
// reports whether the store holds live entries under that secret and, when
// it holds none, the fingerprint of one other secret with live entries, or
// "". Other may be "" when own is true.
type Secrets interface {
	Fingerprint() string
	Secrets(ctx context.Context) (own bool, other string, err error)
}

// SecretError is the error of CheckSecret for a secret the store's live
// entries were not written under. It matches [ErrSecretMismatch].
type SecretError struct {
	Own   string // the fingerprint of the store's secret
	Other string // the fingerprint of a secret live entries were written under
}

// Error names both fingerprints, never a secret.
func (e *SecretError) Error() string {
	return fmt.Sprintf("store: the store holds live entries under the secret with fingerprint %s and none under this one's (%s): is it the app's secret?", e.Other, e.Own)
}

// Is reports whether target is [ErrSecretMismatch].
func (e *SecretError) Is(target error) bool { return target == ErrSecretMismatch }

// CheckSecret returns a *[SecretError] when the store holds live entries under
// another secret and none under its own: a tool given the wrong secret would
// read and reset nothing. It returns nil for a backend without secrets, an
// empty store, or one holding entries of its own secret. A store that cannot
// answer is an error matching [ErrUnavailable].
func (s *Store) CheckSecret(ctx context.Context) error {
	b, ok := s.b.(Secrets)
	if !ok {
		return nil
	}
	own, other, err := b.Secrets(ctx)
	switch {
	case err != nil:
		return fmt.Errorf("store: checking the secret: %w", s.classify(ctx, err))
	case !own && other != "":
		return &SecretError{Own: b.Fingerprint(), Other: other}
	}
	return nil
}
