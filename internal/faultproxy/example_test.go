package faultproxy_test

import (
	"fmt"
	"net"

	"github.com/gatecount/gatecount/internal/faultproxy"
)

func Example() {
	// A server the client would normally reach directly.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()

	p, err := faultproxy.New(ln.Addr().String())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer p.Close()

	// Point the client at p.Addr(), then break things:
	p.Cut()       // the server seems down
	p.Restore()   // it is back
	p.BlackHole() // the server seems to hang
	p.Restore()
	fmt.Println("proxying through", p.Addr() != "")
	// Output: proxying through true
}
