package redis_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/gatecount/gatecount/internal/faultproxy"
	"github.com/gatecount/gatecount/store"
	redisstore "github.com/gatecount/gatecount/store/redis"
)

// TestFaults: a Redis that is down, slow or black-holed is answered
// unavailable, by the guard's deadline at the latest, with the calls in
// flight bounded; once it answers again, the store recovers by itself.
func TestFaults(t *testing.T) {
	const maxInFlight = 8
	tests := []struct {
		name  string
		fault func(p *faultproxy.Proxy)
		// want are the reasons a call may be answered with during the
		// fault; overloaded (the in-flight bound or the open breaker) is
		// always allowed.
		want []store.Reason
	}{
		{"down", (*faultproxy.Proxy).Cut, []store.Reason{store.ReasonDown, store.ReasonDeadline}},
		{"slow", func(p *faultproxy.Proxy) { p.Delay(2 * time.Second) }, []store.Reason{store.ReasonDeadline, store.ReasonDown}},
		{"black-hole", (*faultproxy.Proxy).BlackHole, []store.Reason{store.ReasonDeadline, store.ReasonDown}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			newClient(t) // skips or fails when Redis is unreachable
			target := clientOptions(t, "").Addr
			p, err := faultproxy.New(target)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			c := redis.NewClient(clientOptions(t, p.Addr()))
			defer c.Close()
			s, err := redisstore.New(t.Context(), c, redisstore.Options{
				Secret: newSecret(),
				Store: store.Options{
					Deadline:    200 * time.Millisecond,
					MaxInFlight: maxInFlight,
					Breaker:     store.BreakerOptions{Failures: 3, Cooldown: 100 * time.Millisecond},
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			h := handle(t, s, randomName("fault"))
			key := []string{"k"}
			caps := []store.Budget{{Limit: 1000, Window: time.Hour}}
			if _, err := h.Count(t.Context(), key, caps, 1); err != nil {
				t.Fatalf("before the fault: %v", err)
			}

			tt.fault(p)
			var wg sync.WaitGroup
			errs := make(chan error, 64*2)
			for i := range 64 {
				wg.Go(func() {
					var err error
					if i%2 == 0 {
						_, err = h.Count(t.Context(), key, caps, 1)
					} else {
						err = h.Update(t.Context(), key, incrFor(time.Hour))
					}
					errs <- err
					if n := s.InFlight(); n > maxInFlight {
						t.Errorf("%d calls in flight, bound %d", n, maxInFlight)
					}
				})
			}
			wg.Wait()
			close(errs)
			seen := map[store.Reason]int{}
			for err := range errs {
				if err == nil {
					continue // sent before the fault took hold
				}
				r := store.ReasonOf(err)
				seen[r]++
				if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("during the fault: %v, want unavailable", err)
					continue
				}
				ok := r == store.ReasonOverloaded
				for _, w := range tt.want {
					ok = ok || r == w
				}
				if !ok {
					t.Errorf("during the fault: %v (%v), want one of %v or overloaded", err, r, tt.want)
				}
			}
			t.Logf("answers during the fault: %v", seen)
			if len(seen) == 0 {
				t.Errorf("every call succeeded during the fault")
			}

			p.Restore()
			recovered := false
			for i := 0; i < 200 && !recovered; i++ {
				_, err := h.Count(t.Context(), key, caps, 1)
				recovered = err == nil
				if !recovered {
					time.Sleep(50 * time.Millisecond)
				}
			}
			if !recovered {
				t.Fatalf("the store did not recover within 200 attempts after the fault ended")
			}
			if err := h.Update(t.Context(), key, incrFor(time.Hour)); err != nil {
				t.Errorf("Update after recovery: %v", err)
			}
		})
	}
}

// TestScriptCacheFlushed: a Redis that lost its scripts (a restart, a
// failover, SCRIPT FLUSH) gets them again.
func TestScriptCacheFlushed(t *testing.T) {
	c := newClient(t)
	s := open(t, c, redisstore.Options{Secret: newSecret()})
	h := handle(t, s, randomName("flush"))
	caps := []store.Budget{{Limit: 10, Window: time.Minute}}
	for i := range 2 {
		if err := c.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		tl, err := h.Count(t.Context(), []string{"k"}, caps, 1)
		if err != nil || tl.Counts[0] != int64(2*i+1) {
			t.Fatalf("Count after SCRIPT FLUSH: %v, count %d", err, tl.Counts[0])
		}
		if err := c.ScriptFlush(t.Context()).Err(); err != nil {
			t.Fatal(err)
		}
		if err := h.Update(t.Context(), []string{"k"}, incrFor(time.Minute)); err != nil {
			t.Fatalf("Update after SCRIPT FLUSH: %v", err)
		}
	}
}

// TestOpenURL: the URL selects a store with a client of its own, which
// Close closes; a bad URL is refused without repeating its password.
func TestOpenURL(t *testing.T) {
	newClient(t) // skips or fails when Redis is unreachable
	s, err := redisstore.OpenURL(t.Context(), redisURL(), redisstore.Options{Secret: newSecret()})
	if err != nil {
		t.Fatal(err)
	}
	h := handle(t, s, randomName("url"))
	if _, err := h.Count(t.Context(), []string{"k"}, []store.Budget{{Limit: 1, Window: time.Minute}}, 1); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{
		"postgres://user:hunter2@host/db",
		"redis://user:hunter2@host/notadb",
		"redis://user:hunter2@host:6379/0?pool_size=many",
		"::not a url hunter2",
	} {
		_, err := redisstore.OpenURL(t.Context(), bad, redisstore.Options{Secret: newSecret()})
		if !errors.Is(err, redisstore.ErrURL) {
			t.Errorf("OpenURL(%q): %v, want %v", bad, err, redisstore.ErrURL)
		} else if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("OpenURL(%q): %q repeats the password", bad, err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	if _, err := redisstore.OpenURL(ctx, "redis://127.0.0.1:1/0", redisstore.Options{Secret: newSecret()}); !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("OpenURL of a Redis that is not there: %v, want unavailable", err)
	}
}

// lossyConn is a connection that, once armed, loses the answer to the next
// script it sends: the server runs the script, and the client reads EOF.
type lossyConn struct {
	net.Conn
	arm    *atomic.Bool
	losing bool
}

func (c *lossyConn) Write(p []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(p), []byte("evalsha")) && c.arm.CompareAndSwap(true, false) {
		c.losing = true
	}
	return c.Conn.Write(p)
}

func (c *lossyConn) Read(p []byte) (int, error) {
	if !c.losing {
		return c.Conn.Read(p)
	}
	c.Conn.Read(p) // the answer arrives: the script ran
	c.Conn.Close()
	return 0, io.EOF
}

// TestNoRetryAfterLostAnswer: a script whose answer was lost is not sent
// again, even by a client that retries commands (a standalone client with
// MaxRetries, a cluster client): running it again would count the attempt
// twice. The call is answered unavailable and the attempt counted once.
func TestNoRetryAfterLostAnswer(t *testing.T) {
	var arm atomic.Bool
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lossyConn{Conn: c, arm: &arm}, nil
	}
	clients := map[string]func(t *testing.T) redis.UniversalClient{
		"standalone": func(t *testing.T) redis.UniversalClient {
			o := clientOptions(t, "")
			o.MaxRetries = 3
			o.Dialer = dial
			c := redis.NewClient(o)
			t.Cleanup(func() { c.Close() })
			newClient(t) // skips or fails when Redis is unreachable
			return c
		},
		"cluster": func(t *testing.T) redis.UniversalClient {
			newCluster(t) // skips or fails when the Cluster is unreachable
			o, err := redis.ParseClusterURL(strings.TrimSuffix(clusterURL(), "/0"))
			if err != nil {
				t.Fatal(err)
			}
			o.Dialer = dial
			c := redis.NewClusterClient(o)
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
	for name, mk := range clients {
		t.Run(name, func(t *testing.T) {
			s := open(t, mk(t), redisstore.Options{Secret: newSecret()})
			h := handle(t, s, randomName("lost"))
			caps := []store.Budget{{Limit: 10, Window: time.Minute}}
			key := []string{"k"}
			if _, err := h.Count(t.Context(), key, caps, 1); err != nil {
				t.Fatal(err)
			}
			arm.Store(true)
			_, err := h.Count(t.Context(), key, caps, 1)
			if arm.Load() {
				t.Fatal("no script was sent")
			}
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("Count whose answer was lost: %v, want unavailable", err)
			}
			es, err := h.Read(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			if string(es[0].Value) != "2" {
				t.Errorf("after one count and one whose answer was lost, the count is %s, want 2 (the script ran once)", es[0].Value)
			}
		})
	}
}
