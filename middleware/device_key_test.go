package middleware_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/gatecount/gatecount/middleware"
	"github.com/gatecount/gatecount/store"
	"github.com/gatecount/gatecount/store/memory"
)

// sharedBackend is the memory backend taken for a shared one, as a store
// of several instances is.
type sharedBackend struct{ *memory.Backend }

func (sharedBackend) Shared() bool { return true }

// Device cookies signed with a key of the process, on a shared store, are
// warned of once at start: other instances would reject them.
func TestDeviceKeyNotSharedWarning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		device middleware.DeviceOptions
		warned bool
	}{
		{"shared store, no secret", true, middleware.DeviceOptions{}, true},
		{"shared store, a secret", true, middleware.DeviceOptions{Secret: deviceSecret}, false},
		{"shared store, devices off", true, middleware.DeviceOptions{Off: true}, false},
		{"memory store, no secret", false, middleware.DeviceOptions{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storeOf(t, tc.shared)
			var buf strings.Builder
			g, err := middleware.SignIn(handle(t, s, "login:"), middleware.SignInOptions{
				Device: tc.device,
				Logger: slog.New(slog.NewTextHandler(&buf, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			g.Close()
			if n := strings.Count(buf.String(), "kind="+middleware.KindDeviceKeyNotShared); n != map[bool]int{false: 0, true: 1}[tc.warned] {
				t.Errorf("warned %d times, want warned %v:\n%s", n, tc.warned, buf.String())
			}
		})
	}
}

// A proof of work signed with a key of the process, on a shared store, is
// warned of once at start: other instances would refuse its answers.
func TestChallengeKeyNotSharedWarning(t *testing.T) {
	for _, tc := range []struct {
		name   string
		shared bool
		secret []byte
		warned bool
	}{
		{"shared store, no secret", true, nil, true},
		{"shared store, a secret", true, deviceSecret, false},
		{"memory store, no secret", false, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := storeOf(t, tc.shared)
			pow, err := middleware.NewProofOfWork(middleware.ProofOfWorkOptions{Secret: tc.secret})
			if err != nil {
				t.Fatal(err)
			}
			var buf strings.Builder
			g, err := middleware.SignIn(handle(t, s, "login:"), middleware.SignInOptions{
				Device:    middleware.DeviceOptions{Secret: deviceSecret},
				Challenge: pow,
				Logger:    slog.New(slog.NewTextHandler(&buf, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			g.Close()
			if n := strings.Count(buf.String(), "kind="+middleware.KindChallengeKeyNotShared); n != map[bool]int{false: 0, true: 1}[tc.warned] {
				t.Errorf("warned %d times, want warned %v:\n%s", n, tc.warned, buf.String())
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
