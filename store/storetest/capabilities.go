package storetest

import (
	"context"
	"errors"
	"time"

	"github.com/gatecount/gatecount/store"
)

// Timing of prompt-deadline.
const (
	// promptDeadline is the deadline of a call made while another holds
	// its key.
	promptDeadline = 200 * time.Millisecond
	// promptSlack is how long past that deadline the case waits for the
	// call's answer, with the key still held, before it calls the store
	// late. It is far more than a store that honours its context takes.
	promptSlack = 5 * time.Second
)

// promptDeadlineCase: a call whose context ends while another call holds
// its key answers then, without waiting for the key. An Update, a Count and
// a Read through each handle have a deadline of promptDeadline. They answer
// while an Update through First holds their key in its apply. A store that
// claims store.Prompt has its calls run on the caller's goroutine under the
// deadline, and must honour it. For any other store that is not in process
// memory, the guard answers at the deadline itself. It catches a store that
// claims Prompt but waits on a key's lock (or a file's, or a connection's)
// past its context's end, delaying every caller of a hot key. It does not
// apply to a store in process memory (store.Inline), whose calls have no
// deadline.
func promptDeadlineCase(r *runner) error {
	if r.p.First.Store().Inline() {
		return r.notApplicable("the store runs in process memory (store.Inline): its calls have no deadline")
	}
	k := r.key("prompt")
	if _, _, err := r.put(r.p.First, `0`, longTTL, k); err != nil {
		return err
	}
	holding, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		once := false
		held <- r.p.First.Update(r.ctx, []string{k}, func(now time.Time, es []store.Entry) error {
			if !once {
				once = true
				close(holding)
			}
			select {
			case <-release:
			case <-r.ctx.Done():
			}
			return incr(now, es)
		})
	}()
	defer func() {
		close(release)
		<-held
	}()
	select {
	case <-holding:
	case err := <-held:
		return r.failf("an Update on First to hold a key returned before its apply ran: %v", err)
	case <-r.ctx.Done():
		return r.failf("case ran out of time waiting for an Update on First to hold a key: %v", r.ctx.Err())
	}
	caps := []store.Budget{{Limit: 100, Window: longTTL}}
	calls := []struct {
		name string
		call func(ctx context.Context, h *store.Handle) error
	}{
		{"Update", func(ctx context.Context, h *store.Handle) error { return h.Update(ctx, []string{k}, incr) }},
		{"Count", func(ctx context.Context, h *store.Handle) error {
			_, err := h.Count(ctx, []string{k}, caps, 1)
			return err
		}},
		{"Read", func(ctx context.Context, h *store.Handle) error {
			_, err := h.Read(ctx, []string{k})
			return err
		}},
	}
	_, prompt := r.p.First.Store().Backend().(store.Prompt)
	for _, h := range r.handles() {
		for _, c := range calls {
			ctx, cancel := context.WithTimeout(r.ctx, promptDeadline)
			done := make(chan error, 1)
			go func() { done <- c.call(ctx, h) }()
			t := time.NewTimer(promptDeadline + promptSlack)
			select {
			case <-done:
				t.Stop()
				cancel()
				continue
			case <-t.C:
			case <-r.ctx.Done():
			}
			cancel()
			return r.failf("a %s on %s with a deadline %v away did not answer within %v more, while an Update through First held its key (store.Prompt claimed: %v): it waits past its context's end",
				c.name, r.hname(h), promptDeadline, promptSlack, prompt)
		}
	}
	return nil
}

// sizerCase: a store that tells its entries (store.Sizer) tells the bound
// it was opened with as MaxEntries. Its Entries follows what it holds. A
// store bound to 12 entries holding 8 tells at least 8 and at most 12. Then
// 6 of them expire, Sweep runs and one new key is written. The store tells
// fewer than before, and at least the 3 it holds. It catches a MaxEntries
// that reports a default instead of the configured bound; a limiter sizes
// its memory from it. It catches an Entries that only grows, or only counts
// the keys added.
func sizerCase(r *runner) error {
	if _, ok := r.p.First.Store().Backend().(store.Sizer); !ok {
		return r.notApplicable("the backend offers no store.Sizer")
	}
	const max, short, long = 12, 6, 2
	h, err := r.bounded(max)
	if err != nil {
		return err
	}
	defer h.Store().Close()
	sz, ok := h.Store().Backend().(store.Sizer)
	if !ok {
		return r.failf("First's backend offers store.Sizer, but that of a store NewBounded opened does not")
	}
	if m := sz.MaxEntries(); m != max {
		return r.failf("a store opened with a bound of %d entries told MaxEntries %d", max, m)
	}
	if m := h.Store().Stats().MaxEntries; m != max {
		return r.failf("a store opened with a bound of %d entries told Stats().MaxEntries %d", max, m)
	}
	_, exp, err := r.put(h, `1`, shortTTL, r.keys(h, "sizer-short", short)...)
	if err != nil {
		return err
	}
	if _, _, err := r.put(h, `1`, longTTL, r.keys(h, "sizer-long", long)...); err != nil {
		return err
	}
	before := sz.Entries()
	if before < short+long || before > max {
		return r.failf("a store bound to %d entries holding %d told Entries %d", max, short+long, before)
	}
	if _, err := r.waitPast(h, exp); err != nil {
		return err
	}
	if _, err := h.Store().Sweep(r.ctx); err != nil {
		return r.failf("Sweep: %v", err)
	}
	if _, _, err := r.put(h, `1`, longTTL, r.keyOn(h, "sizer-after")); err != nil {
		return err
	}
	after := sz.Entries()
	if after >= before || after < long+1 {
		return r.failf("a store that told Entries %d holding %d entries, once %d had expired and been swept and one was added, told %d; want from %d to %d: Entries does not follow what it holds",
			before, short+long, short, after, long+1, before-1)
	}
	return nil
}

// secretsCase: a store that names its entries under a secret
// (store.Secrets) tells the same non-empty fingerprint each time. Once it
// holds a live entry written through First, it reports that it holds
// entries under its own secret, so that Store.CheckSecret passes. It
// catches a Secrets that looks under another name than the one the store
// writes under (a fingerprint in another encoding, say). A tool given the
// app's own secret would be told it is the wrong one.
func secretsCase(r *runner) error {
	sec, ok := r.p.First.Store().Backend().(store.Secrets)
	if !ok {
		return r.notApplicable("the backend offers no store.Secrets")
	}
	fp := sec.Fingerprint()
	if fp == "" || sec.Fingerprint() != fp {
		return r.failf("Fingerprint told %q, then %q: want one non-empty fingerprint", fp, sec.Fingerprint())
	}
	if _, _, err := r.put(r.p.First, `1`, longTTL, r.key("secret")); err != nil {
		return err
	}
	own, other, err := sec.Secrets(r.ctx)
	if err != nil {
		return r.failf("Secrets: %v", err)
	}
	if !own {
		return r.failf("Secrets of a store holding a live entry written through it reported none under its own secret (fingerprint %s), and one other secret %q",
			fp, other)
	}
	if err := r.p.First.Store().CheckSecret(r.ctx); err != nil {
		return r.failf("CheckSecret of a store holding a live entry written through it: %v", err)
	}
	return nil
}

// backingCase: a store that shares its backing with other Store values
// (store.Backing) tells one identity for all of them. The guard then
// refuses a handle with First's prefix on another Store over First's
// backing (Pair.SameBacking), with ErrDuplicatePrefix. It grants one with
// another prefix. It catches a Backing that names the Backend value rather
// than what it shares (its pool, its client). Two limiters could then claim
// one prefix, and count in one key space, through two stores of one app.
func backingCase(r *runner) error {
	if _, ok := r.p.First.Store().Backend().(store.Backing); !ok {
		return r.notApplicable("the backend offers no store.Backing")
	}
	if r.p.SameBacking == nil {
		return r.notApplicable("Pair.SameBacking is not set")
	}
	s, err := r.p.SameBacking()
	if err != nil {
		return r.failf("SameBacking: %v", err)
	}
	defer s.Close()
	if _, err := s.Handle(r.p.First.Prefix()); !errors.Is(err, store.ErrDuplicatePrefix) {
		return r.failf("a handle with First's prefix %q on another Store over First's backing: %v, want %v: the Stores' backends tell different identities for one backing",
			r.p.First.Prefix(), err, store.ErrDuplicatePrefix)
	}
	if _, err := r.handle(s, "backing"); err != nil {
		return err
	}
	return nil
}
