package store

import (
	"context"
	"sync"
	"time"
)

// Loop is a store's background goroutine (its sweep, say). It runs until
// Stop, which waits for it.
type Loop struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// Go starts run in a goroutine of its own and returns its Loop. run's
// context keeps parent's values but not its deadline or cancellation: it
// ends on Stop, and run should return then.
func Go(parent context.Context, run func(ctx context.Context)) *Loop {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	l := &Loop{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		run(ctx)
	}()
	return l
}

// Stop ends the loop's context and waits for run to return. It is
// idempotent and safe to call from several goroutines.
func (l *Loop) Stop() {
	l.once.Do(l.cancel)
	<-l.done
}

// Every calls f every d until ctx ends, and returns then. It does not call f
// at once.
func Every(ctx context.Context, d time.Duration, f func(ctx context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f(ctx)
		}
	}
}

// Build is the constructor path every store shares: it gives *o its
// defaults, then calls newBackend (which reads them) and puts the backend
// behind the guard with them.
func Build[B Backend](o *Options, newBackend func() (B, error)) (*Store, error) {
	*o = o.WithDefaults()
	b, err := newBackend()
	if err != nil {
		return nil, err
	}
	return New(b, *o), nil
}
