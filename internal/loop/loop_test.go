package loop_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gatecount/gatecount/internal/loop"
	"go.uber.org/goleak"
)

// TestLoopRunsEveryTaskUntilStop: both tasks of one loop run, one at a
// time, again and again; Stop ends the loop, waits for it, and may be
// called again and from several goroutines.
func TestLoopRunsEveryTaskUntilStop(t *testing.T) {
	defer goleak.VerifyNone(t)
	type key struct{}
	var mu sync.Mutex
	running := 0
	runs := make(chan int, 100)
	task := func(id int) loop.Task {
		return loop.Task{Every: time.Millisecond, Do: func(ctx context.Context) {
			if ctx.Value(key{}) != "parent" {
				t.Error("the loop's context lost the parent's values")
			}
			mu.Lock()
			running++
			if running > 1 {
				t.Error("two tasks of one loop ran at once")
			}
			mu.Unlock()
			select {
			case runs <- id:
			default:
			}
			mu.Lock()
			running--
			mu.Unlock()
		}}
	}
	parent, cancel := context.WithCancel(context.WithValue(context.Background(), key{}, "parent"))
	cancel() // the loop ignores the parent's cancellation
	l := loop.Go(parent, func(ctx context.Context) { loop.Every(ctx, task(0), task(1)) })
	seen := [2]int{}
	for seen[0] < 3 || seen[1] < 3 {
		seen[<-runs]++
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(l.Stop)
	}
	wg.Wait()
	l.Stop()
	for len(runs) > 0 {
		<-runs
	}
	select {
	case id := <-runs:
		t.Fatalf("task %d ran after Stop returned", id)
	default:
	}
}
