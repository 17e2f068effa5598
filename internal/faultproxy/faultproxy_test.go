package faultproxy_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gatecount/gatecount/internal/faultproxy"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// echoServer answers every line with the same line, until the test ends.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T) *faultproxy.Proxy {
	t.Helper()
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func dial(t *testing.T, p *faultproxy.Proxy) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends line and reads the echo, waiting at most wait.
func roundTrip(c net.Conn, r *bufio.Reader, line string, wait time.Duration) (string, error) {
	if err := c.SetDeadline(time.Now().Add(wait)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	return got[:len(got)-1], nil
}

// tryNew dials p and makes one round trip. The proxy may reset the
// connection before the dial returns, so either step may fail.
func tryNew(p *faultproxy.Proxy) error {
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = roundTrip(c, bufio.NewReader(c), "x", patient)
	return err
}

const patient = 10 * time.Second

func isTimeout(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded)
}

func TestPass(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	for _, line := range []string{"one", "two", "three"} {
		got, err := roundTrip(c, r, line, patient)
		if err != nil || got != line {
			t.Fatalf("roundTrip(%q) = %q, %v", line, got, err)
		}
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns() = %d, want 1", n)
	}
}

func TestCut(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before", patient); err != nil {
		t.Fatal(err)
	}
	p.Cut()
	if _, err := roundTrip(c, r, "after", patient); err == nil || isTimeout(err) {
		t.Fatalf("roundTrip on a cut connection: %v, want a connection error", err)
	}
	// New connections are refused while cut.
	if err := tryNew(p); err == nil || isTimeout(err) {
		t.Fatalf("new connection while cut: %v, want a connection error", err)
	}
	p.Restore()
	c3, r3 := dial(t, p)
	if got, err := roundTrip(c3, r3, "restored", patient); err != nil || got != "restored" {
		t.Fatalf("after Restore: %q, %v", got, err)
	}
}

func TestBlackHole(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "before", patient); err != nil {
		t.Fatal(err)
	}
	p.BlackHole()
	if _, err := roundTrip(c, r, "held", 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("roundTrip through a black hole: %v, want a timeout", err)
	}
	c2, r2 := dial(t, p) // accepted and held
	if _, err := roundTrip(c2, r2, "new", 100*time.Millisecond); !isTimeout(err) {
		t.Fatalf("roundTrip on a new connection in a black hole: %v, want a timeout", err)
	}
	p.Restore()
	// What was held is delivered after Restore.
	if err := c.SetDeadline(time.Now().Add(patient)); err != nil {
		t.Fatal(err)
	}
	if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
		t.Fatalf("held line after Restore: %q, %v", got, err)
	}
	if err := c2.SetDeadline(time.Now().Add(patient)); err != nil {
		t.Fatal(err)
	}
	if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("held new connection after Restore: %q, %v", got, err)
	}
}

func TestDelay(t *testing.T) {
	p := newProxy(t)
	c, r := dial(t, p)
	const d = 50 * time.Millisecond
	p.Delay(d)
	start := time.Now()
	if got, err := roundTrip(c, r, "slow", patient); err != nil || got != "slow" {
		t.Fatalf("roundTrip with delay: %q, %v", got, err)
	}
	// Each direction holds its chunk for d: at least 2d in all. Only a
	// lower bound is checked; an upper bound would fail on a busy machine.
	if el := time.Since(start); el < 2*d {
		t.Errorf("round trip with Delay(%v) took %v, want at least %v", d, el, 2*d)
	}
	p.Restore()
	if got, err := roundTrip(c, r, "fast", patient); err != nil || got != "fast" {
		t.Fatalf("roundTrip after Restore: %q, %v", got, err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	p, err := faultproxy.New(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	c, r := dial(t, p)
	if _, err := roundTrip(c, r, "x", patient); err != nil {
		t.Fatal(err)
	}
	held, _ := dial(t, p)
	p.BlackHole()
	_, _ = io.WriteString(held, "stuck\n")
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := roundTrip(c, r, "y", patient); err == nil || isTimeout(err) {
		t.Fatalf("roundTrip after Close: %v, want a connection error", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), patient); err == nil {
		t.Fatal("dial after Close succeeded")
	}
}

func TestTargetDown(t *testing.T) {
	// Nothing listens on port 1 of the loopback address.
	p, err := faultproxy.New("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := tryNew(p); err == nil || isTimeout(err) {
		t.Fatalf("round trip to a target that is down: %v, want a connection error", err)
	}
}
