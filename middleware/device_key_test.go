package middleware_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/middleware/challenge"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// sharedBackend is the memory backend taken for a shared one, as a store
// of several instances is.
type sharedBackend struct{ *memory.Backend }

func (sharedBackend) Shared() bool { return true }

// A guard on a shared store refuses to start without a secret for what it
// keys: device cookies, the password count, puzzles. A key of each process
// would sign what other instances refuse, and count one password apart on
// each. On a store of one process, a random key of the process serves.
func TestSignInSecretOnSharedStore(t *testing.T) {
	pow := func(secret []byte) challenge.Provider {
		p, err := challenge.NewProofOfWork(challenge.ProofOfWorkOptions{Secret: secret})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	off := middleware.DeviceOptions{Off: true}
	for _, tc := range []struct {
		name   string
		shared bool
		o      middleware.SignInOptions
		verify bool // a code guard, of SignInOptions{Code: true}
		fails  string
	}{
		{"shared, no secret", true, middleware.SignInOptions{}, false, "device cookies"},
		{"shared, devices off, spray on", true, middleware.SignInOptions{Device: off}, false, "password count"},
		{"shared, devices and spray off", true, middleware.SignInOptions{Device: off, Spray: middleware.SprayOptions{Off: true}}, false, ""},
		{"shared, a secret", true, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}}, false, ""},
		{"shared, puzzles without a secret", true, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}, Challenge: pow(nil)}, false, "puzzles"},
		{"shared, puzzles with a secret", true, middleware.SignInOptions{Device: middleware.DeviceOptions{Secret: deviceSecret}, Challenge: pow(powSecret)}, false, ""},
		{"shared, code", true, middleware.SignInOptions{}, true, ""},
		{"memory, no secret", false, middleware.SignInOptions{Challenge: pow(nil)}, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := handle(t, storeOf(t, tc.shared), "login:")
			var err error
			if tc.verify {
				var g *middleware.SignInGuard
				if g, err = middleware.SignIn(h, middleware.SignInOptions{Code: true, Logger: quiet}); err == nil {
					g.Close()
				}
			} else {
				tc.o.Logger = quiet
				var g *middleware.SignInGuard
				if g, err = middleware.SignIn(h, tc.o); err == nil {
					g.Close()
				}
			}
			if tc.fails == "" {
				if err != nil {
					t.Fatalf("%v, want a guard", err)
				}
				return
			}
			if !errors.Is(err, middleware.ErrNoSecret) || !strings.Contains(err.Error(), tc.fails) || !strings.Contains(err.Error(), "GATECOUNT_SECRET") {
				t.Fatalf("%v, want an error matching ErrNoSecret naming its %s and GATECOUNT_SECRET", err, tc.fails)
			}
		})
	}
}

// The real shared stores say they are shared: a guard on PostgreSQL or
// Redis without a secret does not start, and with one does.
func TestSignInSecretOnRealSharedStores(t *testing.T) {
	for name, open := range exactStores() {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			for i, secret := range [][]byte{nil, deviceSecret} {
				g, err := middleware.SignIn(handle(t, s, fresh("secret")), middleware.SignInOptions{Name: fmt.Sprint("login", i), Logger: quiet, Device: middleware.DeviceOptions{Secret: secret}})
				if err == nil {
					g.Close()
				}
				if want := secret == nil && s.Shared(); errors.Is(err, middleware.ErrNoSecret) != want || (err != nil && !want) {
					t.Fatalf("secret %v: %v, want ErrNoSecret %v", secret != nil, err, want)
				}
			}
		})
	}
}

// storeOf returns a memory store, told to be shared when shared is set,
// closed when t ends.
func storeOf(t *testing.T, shared bool) *store.Store {
	var s *store.Store
	if shared {
		b := memory.NewBackend(memory.Options{Store: store.Options{Logger: quiet}.WithDefaults()})
		t.Cleanup(func() { b.Close() })
		s = store.New(sharedBackend{b}, store.Options{Logger: quiet})
	} else {
		s = memory.New(memory.Options{Store: store.Options{Logger: quiet}})
	}
	t.Cleanup(func() { s.Close() })
	return s
}
