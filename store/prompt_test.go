package store

import (
	"context"
	"errors"
	"testing"
	"time"
)

// promptFake is a fake that promises to return once its context is done.
type promptFake struct{ fake }

func (*promptFake) Prompt() bool { return true }

func TestPromptBackend(t *testing.T) {
	opts := Options{Logger: quiet, Deadline: 50 * time.Millisecond, Breaker: BreakerOptions{Failures: 2, Cooldown: time.Hour}}
	t.Run("deadline", func(t *testing.T) {
		for name, update := range map[string]func(ctx context.Context, _ ApplyFunc) error{
			"returns the context's error": func(ctx context.Context, _ ApplyFunc) error { <-ctx.Done(); return ctx.Err() },
			"returns its own error":       func(ctx context.Context, _ ApplyFunc) error { <-ctx.Done(); return errors.New("conn closed") },
		} {
			b := &promptFake{fake{update: update}}
			s := New(b, opts)
			h, _ := s.Handle("p:")
			err := h.Update(context.Background(), []string{"k"}, func(time.Time, []Entry) error { return nil })
			if ReasonOf(err) != ReasonDeadline {
				t.Errorf("%s: %v, want reason deadline", name, err)
			}
			if s.InFlight() != 0 || s.running.Load() != 0 {
				t.Errorf("%s: %d in flight, %d goroutines after the call", name, s.InFlight(), s.running.Load())
			}
			s.Close()
		}
	})
	t.Run("the nearer deadline ends the call", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			caller time.Duration // the caller's deadline; the guard's is 50ms
			want   error
		}{
			{"the caller's", 10 * time.Millisecond, context.DeadlineExceeded},
			{"the guard's", time.Hour, ErrUnavailable},
		} {
			b := &promptFake{fake{update: func(ctx context.Context, _ ApplyFunc) error { <-ctx.Done(); return ctx.Err() }}}
			s := New(b, opts)
			h, _ := s.Handle("p:")
			ctx, cancel := context.WithTimeout(context.Background(), tc.caller)
			err := h.Update(ctx, []string{"k"}, func(time.Time, []Entry) error { return nil })
			cancel()
			if !errors.Is(err, tc.want) {
				t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
			}
			if tc.want == ErrUnavailable && ReasonOf(err) != ReasonDeadline {
				t.Errorf("%s: %v, want reason deadline", tc.name, err)
			}
			s.Close()
		}
	})
	t.Run("on the caller's goroutine", func(t *testing.T) {
		type key struct{}
		b := &promptFake{fake{update: func(ctx context.Context, apply ApplyFunc) error {
			if ctx.Value(key{}) != "caller" {
				return errors.New("not the caller's context")
			}
			return apply(time.Now(), make([]Entry, 1))
		}}}
		s := New(b, opts)
		defer s.Close()
		h, _ := s.Handle("p:")
		ctx := context.WithValue(context.Background(), key{}, "caller")
		if err := h.Update(ctx, []string{"k"}, func(time.Time, []Entry) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("apply's error passes and spares the breaker", func(t *testing.T) {
		s := New(&promptFake{}, opts)
		defer s.Close()
		h, _ := s.Handle("p:")
		mine := errors.New("mine")
		for range 5 {
			if err := h.Update(context.Background(), []string{"k"}, func(time.Time, []Entry) error { return mine }); err != mine {
				t.Fatalf("got %v, want apply's own error", err)
			}
		}
		if s.BreakerOpen() {
			t.Fatal("apply's errors opened the breaker")
		}
	})
	t.Run("failures open the breaker", func(t *testing.T) {
		b := &promptFake{fake{update: func(context.Context, ApplyFunc) error { return errors.New("down") }}}
		s := New(b, opts)
		defer s.Close()
		h, _ := s.Handle("p:")
		for range 2 {
			h.Update(context.Background(), []string{"k"}, func(time.Time, []Entry) error { return nil })
		}
		calls := b.calls.Load()
		if err := h.Update(context.Background(), []string{"k"}, func(time.Time, []Entry) error { return nil }); !errors.Is(err, ErrBreakerOpen) || b.calls.Load() != calls {
			t.Fatalf("after 2 failures: %v, backend called %d more times", err, b.calls.Load()-calls)
		}
	})
}
