package storetest

import (
	"fmt"
	"strconv"
	"time"

	"github.com/gatecount/gatecount/store"
)

// prefixIsolation: First and Other never see each other's keys, in Read,
// delete or Count. It catches a store that ignores the prefix.
func prefixIsolation(r *runner) error {
	if r.p.First.Prefix() == r.p.Other.Prefix() {
		return r.failf("Pair.Other has First's prefix %q; it needs another", r.p.First.Prefix())
	}
	k, only := r.key("iso"), r.key("iso-only")
	if _, _, err := r.put(r.p.First, `"first"`, longTTL, k, only); err != nil {
		return err
	}
	if _, _, err := r.put(r.p.Other, `"other"`, longTTL, k); err != nil {
		return err
	}
	check := func(h *store.Handle, want string) error {
		// One key a Read: under Other's prefix, k and only may lie in
		// parts of a spread handle apart.
		es, err := r.mustRead(h, k)
		if err != nil {
			return err
		}
		if string(es[0].Value) != want {
			return r.failf("Read of one key on %s gave %s, want %s: prefixes are not kept apart", r.hname(h), short(es[0].Value), want)
		}
		if es, err = r.mustRead(h, only); err != nil {
			return err
		}
		if h == r.p.Other && es[0].Live() {
			return r.failf("a key written only through First was read on Other")
		}
		return nil
	}
	if err := check(r.p.First, `"first"`); err != nil {
		return err
	}
	if err := check(r.p.Other, `"other"`); err != nil {
		return err
	}
	if err := r.update(r.p.Other, []string{k}, func(_ time.Time, es []store.Entry) error {
		es[0].Value = nil
		return nil
	}); err != nil {
		return r.failf("deleting Update on Other: %v", err)
	}
	if err := check(r.p.First, `"first"`); err != nil {
		return err
	}
	c := r.key("iso-count")
	caps := []store.Budget{{Limit: 1, Window: time.Minute}}
	if _, err := r.count(r.p.First, []string{c}, caps, 1); err != nil {
		return r.failf("Count on First: %v", err)
	}
	t, err := r.count(r.p.Other, []string{c}, caps, 1)
	if err != nil {
		return r.failf("Count on Other: %v", err)
	}
	if !t.Allowed || t.Counts[0] != 1 {
		return r.failf("a key counted to its cap through First was at %d on Other (allowed: %v), want a count of its own", t.Counts[0], t.Allowed)
	}
	return nil
}

// separators are what a store might put between a prefix and a key when it
// joins them into one name: nothing, or one of these.
var separators = []string{"", ":", "/", "|", ".", "-", "_", "#", " "}

// nestedPrefixes: handles whose prefixes and keys would join into the same
// string keep their keys apart. For each separator sep a store might join
// them with, a handle "P" writes and counts the key "q"+sep+"k". A handle
// "P"+sep+"q" writes and counts the key "k". With no separator, the handles
// are "P" and "Px:", as a handle "p" and a handle "px:" would be. Each
// reads back its own value and counts from zero. The case opens these
// handles itself, on First's Store. It catches a store that names an entry
// by its prefix and key joined, with or without a separator.
func nestedPrefixes(r *runner) error {
	s := r.p.First.Store()
	base, err := r.handle(s, "n")
	if err != nil {
		return err
	}
	caps := []store.Budget{{Limit: 1, Window: time.Minute}}
	for i, sep := range separators {
		q := "q"
		if sep == "" {
			q = "x:"
		}
		inner, err := r.handle(s, "n"+sep+q)
		if err != nil {
			return err
		}
		outerKey, innerKey := q+sep+"k", "k"
		ov, iv := fmt.Sprintf(`"outer-%d"`, i), fmt.Sprintf(`"inner-%d"`, i)
		if _, _, err := r.put(base, ov, longTTL, outerKey); err != nil {
			return err
		}
		if _, _, err := r.put(inner, iv, longTTL, innerKey); err != nil {
			return err
		}
		for _, c := range []struct {
			h     *store.Handle
			key   string
			value string
		}{{base, outerKey, ov}, {inner, innerKey, iv}} {
			es, err := r.mustRead(c.h, c.key)
			if err != nil {
				return err
			}
			if string(es[0].Value) != c.value {
				return r.failf("handles %q and %q each wrote a key (%q and %q) that joins with its prefix into one name; Read of %q on %q gave %s, want %s: prefix and key are joined into one name (separator %q)",
					base.Prefix(), inner.Prefix(), outerKey, innerKey, c.key, c.h.Prefix(), short(es[0].Value), c.value, sep)
			}
		}
		cq := "c" + strconv.Itoa(i)
		if sep == "" {
			cq += ":"
		}
		ck := cq + sep + "k"
		cinner, err := r.handle(s, "n"+sep+cq)
		if err != nil {
			return err
		}
		if t, err := r.count(base, []string{ck}, caps, 1); err != nil || !t.Allowed {
			return r.failf("Count on handle %q of key %q: allowed %v, %v", base.Prefix(), ck, t.Allowed, err)
		}
		t, err := r.count(cinner, []string{"k"}, caps, 1)
		if err != nil {
			return r.failf("Count on handle %q: %v", cinner.Prefix(), err)
		}
		if !t.Allowed || t.Counts[0] != 1 {
			return r.failf("key %q counted to its cap of 1 on handle %q; key \"k\" on handle %q was then at %d (allowed %v), want a count of its own: prefix and key are joined into one name (separator %q)",
				ck, base.Prefix(), cinner.Prefix(), t.Counts[0], t.Allowed, sep)
		}
	}
	return nil
}
