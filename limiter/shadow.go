package limiter

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// maxShadowKeys bounds the keys a limiter in shadow remembers having
// logged in their current window.
const maxShadowKeys = 4096

// shadowLog logs the would-be refusals of a limiter in shadow, once per key
// per window. It names each key by an ID that means nothing outside this
// process: an HMAC of the key under a key of the process.
type shadowLog struct {
	mac  []byte // the process's HMAC key
	over rate.Sometimes

	mu     sync.Mutex
	logged map[uint64]int64 // key ID → end of the window it was logged in, unix ms
}

func newShadowLog() *shadowLog {
	s := &shadowLog{mac: make([]byte, 32), over: rate.Sometimes{Interval: time.Second}, logged: map[uint64]int64{}}
	rand.Read(s.mac)
	return s
}

// refused logs d, a would-be refusal of l, unless its key was logged in the
// same window. With more than maxShadowKeys keys logged in live windows,
// the rest are logged at most once a second.
func (s *shadowLog) refused(l *Limiter, d *Decision) {
	at := d.Limiting
	if at < 0 || at >= int(d.n) {
		at = d.KeyIndex
	}
	m := hmac.New(sha256.New, s.mac)
	m.Write([]byte(d.keys[at]))
	sum := m.Sum(nil)
	id := binary.BigEndian.Uint64(sum)
	now := d.Now.UnixMilli()
	end := d.expires[at]
	if end <= now {
		end = now + d.Window.Milliseconds()
	}
	s.mu.Lock()
	if e, ok := s.logged[id]; ok && e > now {
		s.mu.Unlock()
		return
	}
	if len(s.logged) >= maxShadowKeys {
		for k, e := range s.logged {
			if e <= now {
				delete(s.logged, k)
			}
		}
	}
	full := len(s.logged) >= maxShadowKeys
	if !full {
		s.logged[id] = end
	}
	s.mu.Unlock()
	line := func() {
		l.log.Info("shadow: attempt over budget let through", "kind", KindShadowDenied,
			"key_id", hex.EncodeToString(sum[:8]), "limit", d.Limit, "window", d.Window, "retry_after", d.RetryAfter)
	}
	if full {
		s.over.Do(line)
		return
	}
	line()
}
