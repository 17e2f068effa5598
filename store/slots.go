package store

import (
	"context"
	"sync"

	"github.com/gatecount/gatecount/internal/overload"
)

// defaultMaxQueued is the default of Options.MaxQueued: the calls of one
// handle that may wait for a slot at once. It is large: a waiting call
// costs about 200 bytes beside the request's own goroutine. It bounds every
// call, patient or not: past it a call is answered overloaded at once.
const defaultMaxQueued = 16384

var (
	errQueueFull = &UnavailableError{Reason: ReasonOverloaded, Err: overload.ErrQueueFull}
	errWaitedOut = &UnavailableError{Reason: ReasonOverloaded, Err: overload.ErrWaitedOut}
)

// lane is one handle's share of its Store: the queue of its calls waiting
// for a slot, and its breaker. Slots go to the lanes with waiters in turn.
// A flood of calls on one handle so waits behind its own queue, and takes
// every other slot at most while another handle has calls waiting.
type lane struct {
	breaker breaker
	// Guarded by the Store's slot mutex.
	head, tail *waiter
	queued     int
	inTurn     bool // in the Store's turn list
}

// waiter is a call waiting for a slot. It waits on its own goroutine, the
// caller's.
type waiter struct {
	ready      chan struct{} // receives the slot; buffered
	prev, next *waiter
	granted    bool // guarded by the slot mutex
}

var waiterPool = sync.Pool{New: func() any { return &waiter{ready: make(chan struct{}, 1)} }}

// slots is a Store's in-flight bound: at most max calls run in the backend
// at once. Calls past it wait their turn, first come first served within a
// lane, lanes in turn.
type slots struct {
	max int64
	// vouched is the lane of every vouched call (see overload.Vouched),
	// whatever its handle: strangers' calls never wait in it.
	vouched lane

	mu      sync.Mutex
	running int64   // slots held
	waiting int64   // calls queued in all lanes
	waited  int64   // calls that have waited since the store opened
	turns   []*lane // lanes with waiters, in the order they get the next slot
}

// acquire takes a slot for a call of l, waiting until ctx ends when none is
// free; a vouched call waits in the vouched lane instead, NoWait or not. It
// answers errQueueFull at once when the lane already has maxQueued calls
// waiting, or for a NoWait call not vouched for, and errWaitedOut when ctx
// ends first. waited reports whether the call had to wait.
func (sl *slots) acquire(ctx context.Context, l *lane, maxQueued int) (waited bool, err error) {
	vouched := overload.IsVouched(ctx)
	if vouched {
		l = &sl.vouched
	}
	sl.mu.Lock()
	if sl.free() {
		sl.running++
		sl.mu.Unlock()
		return false, nil
	}
	if l.queued >= maxQueued || overload.IsNoWait(ctx) && !vouched {
		sl.mu.Unlock()
		return true, errQueueFull
	}
	w := waiterPool.Get().(*waiter)
	l.push(w)
	sl.waiting++
	sl.waited++
	if !l.inTurn {
		l.inTurn = true
		sl.turns = append(sl.turns, l)
	}
	sl.mu.Unlock()

	select {
	case <-w.ready:
		waiterPool.Put(w)
		return true, nil
	case <-ctx.Done():
	}
	sl.mu.Lock()
	if w.granted { // the slot came as the deadline did: pass it on
		sl.mu.Unlock()
		<-w.ready
		waiterPool.Put(w)
		sl.release()
		return true, errWaitedOut
	}
	l.remove(w)
	sl.waiting--
	sl.mu.Unlock()
	waiterPool.Put(w)
	return true, errWaitedOut
}

// tryAcquire takes a slot when one is free and no call waits for one, and
// reports whether it did: acquire without a wait.
func (sl *slots) tryAcquire() bool {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	if !sl.free() {
		return false
	}
	sl.running++
	return true
}

// free reports whether a call may take a slot at once: one is free, and no
// call waits for one. The caller holds sl.mu.
func (sl *slots) free() bool { return sl.waiting == 0 && sl.running < sl.max }

// release gives back a slot: to the first waiter of the next lane in turn,
// or to the pool when nobody waits.
func (sl *slots) release() {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	for len(sl.turns) > 0 {
		l := sl.turns[0]
		sl.turns[0] = nil
		sl.turns = sl.turns[1:]
		w := l.head
		if w == nil { // its waiters all gave up
			l.inTurn = false
			continue
		}
		l.remove(w)
		if l.head != nil {
			sl.turns = append(sl.turns, l)
		} else {
			l.inTurn = false
		}
		sl.waiting--
		w.granted = true
		w.ready <- struct{}{}
		return
	}
	sl.running--
}

// inFlight returns the slots held.
func (sl *slots) inFlight() int64 {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.running
}

// queuedNow returns the calls waiting for a slot.
func (sl *slots) queuedNow() int64 {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.waiting
}

// waitedTotal returns the calls that have waited for a slot.
func (sl *slots) waitedTotal() int64 {
	sl.mu.Lock()
	defer sl.mu.Unlock()
	return sl.waited
}

func (l *lane) push(w *waiter) {
	w.granted, w.next, w.prev = false, nil, l.tail
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.queued++
}

func (l *lane) remove(w *waiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.queued--
}
