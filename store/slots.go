package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// DefaultMaxQueued is the default of Options.MaxQueued: the calls of one
// handle that may wait for a slot at once. It is large: a waiting call
// costs about 200 bytes beside the request's own goroutine. A call that
// waits is counted by the store, exactly; one refused a place in the queue
// has to be counted without it.
const DefaultMaxQueued = 16384

// Why a call that waited for a slot was answered unavailable.
var (
	// ErrQueueFull is the cause of the overloaded answer given at once to a
	// call that finds its handle's queue full.
	ErrQueueFull = errors.New("too many calls waiting for the store")
	// ErrWaitedOut is the cause of the overloaded answer given to a call
	// whose deadline passed while it waited for a slot.
	ErrWaitedOut = errors.New("deadline passed while waiting for the store")
)

// WaitedOut returns the answer to a call whose context ended, with err,
// while it waited for what. That may be a connection of a pool, a writer, a
// batch, or the turn of its keys. A wait is overload, never a failure: the
// error matches [ErrWaitedOut] and has [ReasonOverloaded], so that the call
// neither opens the breaker nor lets an attempt through uncounted. Backends
// use it for the waits of their own.
func WaitedOut(what string, err error) error {
	return &UnavailableError{Reason: ReasonOverloaded, Err: fmt.Errorf("%w: for %s: %w", ErrWaitedOut, what, err)}
}

var (
	errQueueFull = &UnavailableError{Reason: ReasonOverloaded, Err: ErrQueueFull}
	errWaitedOut = &UnavailableError{Reason: ReasonOverloaded, Err: ErrWaitedOut}
)

type patientKey struct{}

// Patient returns a context under which a call waits for a slot even when
// its handle's queue is full (see Options.MaxQueued). It waits for as long
// as ctx lasts. It is for a call that has no other way to be counted. In
// the backend it still has no more than its deadline.
func Patient(ctx context.Context) context.Context {
	return context.WithValue(ctx, patientKey{}, true)
}

// IsPatient reports whether ctx came from Patient.
func IsPatient(ctx context.Context) bool { return ctx.Value(patientKey{}) != nil }

type noWaitKey struct{}

// NoWait returns a context under which a call waits for no slot. It runs
// when a slot is free at once, and is answered overloaded ([ErrQueueFull])
// when the store is busy. It is for a call that something else can make
// later, so that its caller is never held behind a busy store.
func NoWait(ctx context.Context) context.Context {
	return context.WithValue(ctx, noWaitKey{}, true)
}

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

	mu      sync.Mutex
	running int64   // slots held
	waiting int64   // calls queued in all lanes
	waited  int64   // calls that have waited since the store opened
	turns   []*lane // lanes with waiters, in the order they get the next slot
}

// acquire takes a slot for a call of l, waiting until ctx ends when none is
// free. It answers errQueueFull at once when l already has maxQueued calls
// waiting, or for a NoWait call, and errWaitedOut when ctx ends first.
// waited reports whether the call had to wait.
func (sl *slots) acquire(ctx context.Context, l *lane, maxQueued int) (waited bool, err error) {
	sl.mu.Lock()
	if sl.free() {
		sl.running++
		sl.mu.Unlock()
		return false, nil
	}
	if l.queued >= maxQueued && ctx.Value(patientKey{}) == nil || ctx.Value(noWaitKey{}) != nil {
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
