// Package quietport picks free loopback ports for servers that tests
// start as processes, below the kernel's ephemeral range (32768 and up
// here): a process takes a while to listen, and a port from that range
// (a listener on port 0's) may meanwhile become another test's outgoing
// connection's or listener's.
package quietport

import (
	"fmt"
	"math/rand/v2"
	"net"
)

// Base is the lowest port Free returns.
const Base = 20000

// Free returns a port between Base and Base+span that is free on
// 127.0.0.1, as are the ports at each offset from it in alsoFree (a Redis
// Cluster node's bus port is its port + 10,000).
func Free(span int, alsoFree ...int) (int, error) {
	for range 200 {
		port := Base + rand.IntN(span)
		if free(port, alsoFree) {
			return port, nil
		}
	}
	return 0, fmt.Errorf("quietport: no free port between %d and %d", Base, Base+span)
}

// free reports whether port and port+offset for each offset can be
// listened on, all at once.
func free(port int, offsets []int) bool {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, off := range append([]int{0}, offsets...) {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+off))
		if err != nil {
			return false
		}
		held = append(held, l)
	}
	return true
}
