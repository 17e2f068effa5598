// Package turns makes the calls of one process on one key take turns, first
// come first served. Keys share Queues queues by a hash the caller picks,
// so two busy keys of one queue wait for each other. A call with several
// keys takes their queues in ascending order (see lockorder). Calls so
// never wait for each other in a circle. A wait holds nothing else and ends
// with the call's context.
package turns

import (
	"context"

	"github.com/gatecount/gatecount/internal/lockorder"
)

// Queues is how many queues keys share.
const Queues = 1024

// Turns is the queues of one store. Make it with New.
type Turns [Queues]chan struct{}

// New returns queues with no turn taken.
func New() *Turns {
	t := new(Turns)
	for i := range t {
		t[i] = make(chan struct{}, 1)
	}
	return t
}

// Queue returns the queue of a key whose hash is h.
func Queue(h uint64) int { return int(h % Queues) }

// Take waits for the turn of every queue of s, in ascending order; or
// returns ctx's error, having taken none.
func (t *Turns) Take(ctx context.Context, s *lockorder.Set) error {
	ord := s.Ascending()
	for i, q := range ord {
		select {
		case t[q] <- struct{}{}:
			continue // free: no need to watch ctx (which would make its Done channel)
		default:
		}
		select {
		case t[q] <- struct{}{}:
		case <-ctx.Done():
			t.give(ord[:i])
			return ctx.Err()
		}
	}
	return nil
}

// Give ends the turns Take took for s.
func (t *Turns) Give(s *lockorder.Set) { t.give(s.Ascending()) }

func (t *Turns) give(ord []int) {
	for i := len(ord) - 1; i >= 0; i-- {
		<-t[ord[i]]
	}
}
