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
	for i := range names {
		raws[i], present[i] = "", false
		if s, ok := res[i+2].(string); ok {
			raws[i], present[i] = s, true
		}
	}
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

// Read implements store.Backend.
func (b *Backend) Read(ctx context.Context, prefix string, keys []string) ([]store.Entry, error) {
	sp := b.space(prefix)
	names := b.keys(sp, prefix, keys).names[:len(keys)]
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
		exp, v, err := decode(raws[i])
		if err != nil {
			return nil, err
		}
		if exp > now {
			out[i] = store.Entry{Value: []byte(v), ExpiresAt: time.UnixMilli(exp)}
		}
	}
	return out, nil
}
