// Package clock is the seam between gatecount and the passing of time.
// Through it, tests can set and advance the time a store or limiter sees.
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time.
type Clock interface {
	Now() time.Time
}

// Real is the process clock, time.Now.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// Fake is a Clock that moves only when told to. Its zero value is not
// usable; make one with NewFake. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake clock that reads t until it is set or advanced.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake clock's current time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set moves the clock to t, forwards or backwards.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Advance moves the clock forwards by d and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}

// Offset is a Clock that reads another clock shifted by a fixed amount, as
// a machine whose clock is wrong would.
type Offset struct {
	Base  Clock
	Shift time.Duration
}

// Now returns the base clock's time plus the shift.
func (o Offset) Now() time.Time { return o.Base.Now().Add(o.Shift) }
