// Package faultproxy is a loopback TCP proxy that a test puts between a
// client (a pgx pool, a Redis client) and a real server. The test then
// breaks it on command: it cuts connections, delays traffic or swallows it.
// A store's answers to a failing server can so be tested without stopping
// the server other tests share.
//
// A Proxy starts in pass mode, forwarding bytes both ways as they come:
//
//	p, err := faultproxy.New("127.0.0.1:5432")
//	if err != nil { ... }
//	defer p.Close()
//	// point the client at p.Addr() instead of the server
//	p.BlackHole() // the server seems to hang
//	p.Restore()   // it answers again
//
// Every goroutine a Proxy starts stops by Close.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// ErrClosed is returned by the methods of a closed Proxy.
var ErrClosed = errors.New("faultproxy: closed")

type mode uint8

const (
	modePass mode = iota
	modeCut
	modeBlackHole
)

// Proxy forwards TCP connections from a loopback address to a target,
// breaking them as a test tells it to. It is safe for concurrent use.
type Proxy struct {
	target string
	ln     net.Listener
	done   chan struct{} // closed by Close
	wg     sync.WaitGroup

	mu     sync.Mutex
	mode   mode
	delay  time.Duration
	gate   chan struct{} // closed while traffic may flow; open (blocking) in black-hole mode
	links  map[*link]struct{}
	closed bool
}

// ForURL starts a proxy in front of the server a URL names (its host, and
// its port or defaultPort) and returns it with the URL that reaches the
// server through it.
func ForURL(rawURL, defaultPort string) (*Proxy, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, "", fmt.Errorf("faultproxy: %w", err)
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), defaultPort)
	}
	p, err := New(host)
	if err != nil {
		return nil, "", err
	}
	u.Host = p.Addr()
	return p, u.String(), nil
}

// New starts a proxy listening on 127.0.0.1 at a free port that forwards to
// target, a host:port. The target is dialled once per accepted connection,
// so it need not be up when New is called.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	gate := make(chan struct{})
	close(gate)
	p := &Proxy{
		target: target,
		ln:     ln,
		done:   make(chan struct{}),
		gate:   gate,
		links:  make(map[*link]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the host:port clients should dial instead of the target.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Conns returns the number of client connections the proxy holds now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Cut closes every connection the proxy holds, with a reset, and resets new
// connections as soon as they are accepted, until Restore: the server seems
// down.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.mode = modeCut
	p.openGate()
	links := p.takeLinks()
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// BlackHole makes the proxy forward nothing, in either direction, on the
// connections it holds and on new ones, which it accepts and holds, until
// Restore: the server seems to hang, as behind a network partition. Bytes
// read meanwhile are forwarded after Restore.
func (p *Proxy) BlackHole() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mode == modeBlackHole || p.closed {
		return
	}
	p.mode = modeBlackHole
	p.gate = make(chan struct{})
}

// Delay holds every chunk of bytes for d before forwarding it, in both
// directions, until Restore or another Delay; Delay(0) forwards at once.
// It does not change the mode.
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay = max(d, 0)
}

// Restore returns the proxy to passing traffic unchanged, with no delay.
// Connections held by BlackHole resume; connections Cut stay closed.
func (p *Proxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = modePass
	p.delay = 0
	p.openGate()
}

// Close stops the proxy: it closes the listener and every connection and
// waits for all its goroutines to stop. It is idempotent.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.openGate()
	links := p.takeLinks()
	p.mu.Unlock()
	err := p.ln.Close()
	for _, l := range links {
		l.close()
	}
	p.wg.Wait()
	return err
}

// openGate lets held traffic flow; p.mu is held.
func (p *Proxy) openGate() {
	select {
	case <-p.gate:
	default:
		close(p.gate)
	}
}

// takeLinks empties the set of links and returns them; p.mu is held.
func (p *Proxy) takeLinks() []*link {
	out := make([]*link, 0, len(p.links))
	for l := range p.links {
		out = append(out, l)
		delete(p.links, l)
	}
	return out
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.mu.Lock()
		if p.closed || p.mode == modeCut {
			p.mu.Unlock()
			resetConn(c)
			continue
		}
		l := &link{client: c, closed: make(chan struct{})}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve dials the target for l, once the gate lets it, and forwards both
// ways until either side closes.
func (p *Proxy) serve(l *link) {
	defer p.wg.Done()
	defer p.drop(l)
	if !p.wait(l) {
		return
	}
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		resetConn(l.client)
		return
	}
	if !l.setUpstream(up) {
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, up, l.client) }()
	go func() { defer wg.Done(); p.pipe(l, l.client, up) }()
	wg.Wait()
}

// drop forgets l and closes it.
func (p *Proxy) drop(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
	l.close()
}

// wait blocks while traffic is held, then sleeps the delay. It reports false
// when l or the proxy closed meanwhile.
func (p *Proxy) wait(l *link) bool {
	p.mu.Lock()
	gate, delay := p.gate, p.delay
	p.mu.Unlock()
	select {
	case <-gate:
	case <-l.closed:
		return false
	case <-p.done:
		return false
	}
	if delay > 0 {
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-l.closed:
			return false
		case <-p.done:
			return false
		}
	}
	select {
	case <-l.closed:
		return false
	default:
		return true
	}
}

// pipe copies src to dst chunk by chunk, each subject to the mode, and
// closes l when either side fails.
func (p *Proxy) pipe(l *link, dst io.Writer, src io.Reader) {
	defer l.close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(l) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// link is one proxied connection: the client's and, once dialled, the
// target's.
type link struct {
	client net.Conn
	closed chan struct{}

	mu       sync.Mutex
	upstream net.Conn
	isClosed bool
}

// setUpstream records up, or closes it and reports false when l closed
// meanwhile.
func (l *link) setUpstream(up net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed {
		up.Close()
		return false
	}
	l.upstream = up
	return true
}

func (l *link) close() { l.shut(false) }

func (l *link) reset() { l.shut(true) }

func (l *link) shut(reset bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.isClosed {
		return
	}
	l.isClosed = true
	close(l.closed)
	if reset {
		resetConn(l.client)
		if l.upstream != nil {
			resetConn(l.upstream)
		}
		return
	}
	l.client.Close()
	if l.upstream != nil {
		l.upstream.Close()
	}
}

// resetConn closes c with a TCP reset where it can.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	c.Close()
}
