package redis

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gatecount/gatecount/store"
)

// decode splits a raw value into its expiry and value.
func decode(raw string) (exp int64, value string, err error) {
	i := strings.IndexByte(raw, ':')
	if i > 0 {
		exp, err = strconv.ParseInt(raw[:i], 10, 64)
		if err == nil {
			return exp, raw[i+1:], nil
		}
	}
	return 0, "", ErrCorrupt
}

// liveEntry decodes a raw value read at the server's time now into the
// entry it holds: the zero Entry (and exp 0) when it has expired.
func liveEntry(raw string, now int64) (e store.Entry, exp int64, value string, err error) {
	exp, value, err = decode(raw)
	if err != nil || exp <= now {
		return store.Entry{}, 0, "", err
	}
	return store.Entry{Value: []byte(value), ExpiresAt: time.UnixMilli(exp)}, exp, value, nil
}

// rawsFrom fills raws and present from a script's answers vals: raws[i] is
// the raw value of key i and present[i] whether there is one.
func rawsFrom(vals []any, raws []string, present []bool) {
	for i, v := range vals {
		raws[i], present[i] = "", false
		if s, ok := v.(string); ok {
			raws[i], present[i] = s, true
		}
	}
}

// read runs readScript on names and returns the server's time in Unix
// milliseconds; raws[i] is the raw value of names[i] and present[i]
// whether there is one.
func (b *Backend) read(ctx context.Context, names []string, raws []string, present []bool) (int64, error) {
	res, err := b.eval(ctx, readScript, names).Slice()
	if err != nil {
		return 0, err
	}
	if len(res) != len(names)+2 {
		return 0, fmt.Errorf("redis: read answered %d values for %d keys", len(res)-2, len(names))
	}
	now, err := serverTime(res[0], res[1])
	if err != nil {
		return 0, err
	}
	b.clock.observe(now)
	rawsFrom(res[2:], raws, present)
	return now, nil
}

// serverTime turns TIME's seconds and microseconds into Unix milliseconds.
func serverTime(sec, usec any) (int64, error) {
	s, _ := sec.(string)
	u, _ := usec.(string)
	si, err1 := strconv.ParseInt(s, 10, 64)
	ui, err2 := strconv.ParseInt(u, 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("redis: TIME answered %v %v", sec, usec)
	}
	return si*1000 + ui/1000, nil
}

// Read implements [store.Backend].
func (b *Backend) Read(ctx context.Context, prefix string, keys []string) (_ []store.Entry, err error) {
	defer poolWait(&err)
	sp := b.space(prefix)
	ks, err := b.keys(sp, prefix, keys)
	if err != nil {
		return nil, err
	}
	names := ks.names[:len(keys)]
	raws := make([]string, len(keys))
	present := make([]bool, len(keys))
	now, err := b.read(ctx, names, raws, present)
	if err != nil {
		return nil, err
	}
	out := make([]store.Entry, len(keys))
	for i := range keys {
		if !present[i] {
			continue
		}
		var err error
		if out[i], _, _, err = liveEntry(raws[i], now); err != nil {
			return nil, err
		}
	}
	return out, nil
}
