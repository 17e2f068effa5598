// Package loop runs the background goroutines of the module's stores: a
// sweep, an announcement, each on its own ticker.
package loop

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

// Task is work a Loop does every Every.
type Task struct {
	Every time.Duration
	Do    func(ctx context.Context)
}

// Every runs each task every task.Every, one at a time, until ctx ends, and
// returns then. It runs none at once. A task that runs late skips the runs
// it missed, as a time.Ticker does.
func Every(ctx context.Context, tasks ...Task) {
	if len(tasks) == 0 {
		<-ctx.Done()
		return
	}
	next := make([]time.Time, len(tasks))
	start := time.Now()
	for i, t := range tasks {
		next[i] = start.Add(t.Every)
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		i := 0
		for j := range next {
			if next[j].Before(next[i]) {
				i = j
			}
		}
		timer.Reset(time.Until(next[i]))
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		tasks[i].Do(ctx)
		for now := time.Now(); !next[i].After(now); {
			next[i] = next[i].Add(tasks[i].Every)
		}
	}
}
