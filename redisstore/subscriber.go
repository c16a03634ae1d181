package redisstore

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/rueidis"
)

// subscriber keeps sharded pub/sub subscriptions up for a changing set
// of channels: it subscribes to what is added, unsubscribes from what is
// removed, and after a lost connection reconnects with a backoff and
// subscribes again to all of them. On one Redis it keeps one connection;
// on a Redis Cluster one per master that holds a channel's slot, each
// SSUBSCRIBE covering channels of one slot (as the cluster requires), and
// it reads the cluster's slots again every second and whenever a
// connection is lost or a master drops a subscription (a slot moved in a
// resharding, a replica promoted in a failover): channels whose slot has
// another master now are subscribed there. Close stops its goroutines.
type subscriber struct {
	e         *Engine
	onMessage func(rueidis.PubSubMessage)
	// onSubscribed, when set, is called with the channels each successful
	// SSUBSCRIBE covered (to catch up on what was published before).
	onSubscribed func(chans []string)
	onErr        func(error)

	mu    sync.Mutex
	chans map[string]string   // channel → the address of the node it is subscribed on
	nodes map[string]*nodeSub // by address ("" on one Redis)
	slots []string            // on a cluster: the master's address of each slot, nil until read
	wake  chan struct{}       // on a cluster: read the slots again now
	stop  chan struct{}
	done  chan struct{}
	ended sync.WaitGroup // nodeSubs being closed after their channels moved
}

func newSubscriber(e *Engine, onMessage func(rueidis.PubSubMessage), onErr func(error)) *subscriber {
	return &subscriber{e: e, onMessage: onMessage, onErr: onErr, chans: map[string]string{}, nodes: map[string]*nodeSub{},
		wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
}

func (s *subscriber) cluster() bool { return s.e.c.Mode() == rueidis.ClientModeCluster }

// start connects and subscribes to the channels added so far, then
// returns; its goroutines go on.
func (s *subscriber) start() {
	if !s.cluster() {
		s.mu.Lock()
		n := s.node("")
		s.mu.Unlock()
		n.start()
		close(s.done)
		return
	}
	s.refresh()
	s.mu.Lock()
	nodes := make([]*nodeSub, 0, len(s.nodes))
	for _, n := range s.nodes {
		nodes = append(nodes, n)
	}
	s.mu.Unlock()
	for _, n := range nodes {
		n.start()
	}
	go s.route()
}

func (s *subscriber) close() {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	nodes := s.nodes
	s.nodes = map[string]*nodeSub{}
	s.mu.Unlock()
	for _, n := range nodes {
		n.close()
	}
	s.ended.Wait()
}

// change adds or removes a channel; it does not wait for Redis.
func (s *subscriber) change(channel string, add bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !add {
		if addr, ok := s.chans[channel]; ok {
			delete(s.chans, channel)
			if n := s.nodes[addr]; n != nil {
				n.change(channel, false)
			}
		}
		return
	}
	addr := ""
	if s.cluster() {
		if s.slots == nil {
			s.chans[channel] = "" // subscribed once the slots are known
			s.refreshSoon()
			return
		}
		addr = s.slots[slotOf(channel)]
	}
	s.chans[channel] = addr
	s.node(addr).change(channel, true)
}

// node is the connection to the node at addr, made (and on a cluster
// started) on first use. The caller holds s.mu.
func (s *subscriber) node(addr string) *nodeSub {
	if n := s.nodes[addr]; n != nil {
		return n
	}
	n := &nodeSub{s: s, addr: addr, chans: map[string]struct{}{}, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.nodes[addr] = n
	if addr != "" {
		go n.start() // a master's connection starts at once (start waits for those of the first reading)
	}
	return n
}

func (s *subscriber) fail(err error) {
	if err != nil && s.onErr != nil {
		s.onErr(err)
	}
}

// refreshSoon has the router read the slots again.
func (s *subscriber) refreshSoon() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// route reads the cluster's slots every second and when asked, until
// close.
func (s *subscriber) route() {
	defer close(s.done)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-t.C:
		}
		s.refresh()
	}
}

// refresh reads the cluster's slots and moves every channel whose slot's
// master changed to the new one's connection; a connection left with no
// channel is closed.
func (s *subscriber) refresh() {
	slots, err := s.readSlots()
	if err != nil {
		s.fail(err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slots = slots
	for ch, old := range s.chans {
		addr := slots[slotOf(ch)]
		if addr == old && old != "" {
			continue // "" is subscribed nowhere yet
		}
		if n := s.nodes[old]; n != nil && old != addr {
			n.change(ch, false)
		}
		s.chans[ch] = addr
		if addr != "" {
			s.node(addr).change(ch, true)
		}
	}
	used := map[string]bool{}
	for _, addr := range s.chans {
		used[addr] = true
	}
	for addr, n := range s.nodes {
		if !used[addr] {
			delete(s.nodes, addr)
			s.ended.Add(1)
			go func() {
				defer s.ended.Done()
				n.close()
			}()
		}
	}
}

// readSlots asks the cluster which master holds each slot (CLUSTER
// SLOTS); a slot no master holds has "".
func (s *subscriber) readSlots() ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ranges, err := s.e.c.Do(ctx, s.e.c.B().ClusterSlots().Build()).ToArray()
	if err != nil {
		return nil, err
	}
	slots := make([]string, 16384)
	for _, r := range ranges {
		parts, err := r.ToArray()
		if err != nil || len(parts) < 3 {
			continue
		}
		from, err1 := parts[0].AsInt64()
		to, err2 := parts[1].AsInt64()
		master, err3 := parts[2].ToArray()
		if err1 != nil || err2 != nil || err3 != nil || len(master) < 2 || from < 0 || to >= 16384 {
			continue
		}
		host, _ := master[0].ToString()
		port, _ := master[1].AsInt64()
		addr := net.JoinHostPort(host, strconv.FormatInt(port, 10))
		for i := from; i <= to; i++ {
			slots[i] = addr
		}
	}
	return slots, nil
}

// dial is a dedicated connection to the node at addr (any node of one
// Redis for "").
func (s *subscriber) dial(addr string) (rueidis.DedicatedClient, func(), bool) {
	if addr == "" {
		dc, release := s.e.c.Dedicate()
		return dc, release, true
	}
	c := s.e.c.Nodes()[addr]
	if c == nil {
		return nil, nil, false
	}
	dc, release := c.Dedicate()
	return dc, release, true
}

// wanted reports whether channel is still subscribed on the node at
// addr (a sunsubscribe Redis pushed for one that is was not asked for).
func (s *subscriber) wanted(channel, addr string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	a, ok := s.chans[channel]
	return ok && a == addr
}

// nodeSub keeps one connection's subscriptions: one goroutine owns the
// connection, reconnecting with a backoff.
type nodeSub struct {
	s    *subscriber
	addr string // "" on one Redis

	mu    sync.Mutex
	chans map[string]struct{}
	ops   []subOp // changes for the goroutine to carry out, in order
	wake  chan struct{}
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
}

type subOp struct {
	channel string
	add     bool
}

func (n *nodeSub) start() {
	n.once.Do(func() {
		ready := make(chan struct{})
		go n.run(ready)
		<-ready
	})
}

func (n *nodeSub) close() {
	n.once.Do(func() { close(n.done) }) // never started
	select {
	case <-n.stop:
	default:
		close(n.stop)
	}
	<-n.done
}

func (n *nodeSub) change(channel string, add bool) {
	n.mu.Lock()
	if add {
		n.chans[channel] = struct{}{}
	} else {
		delete(n.chans, channel)
	}
	n.ops = append(n.ops, subOp{channel, add})
	n.mu.Unlock()
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

func (n *nodeSub) run(ready chan struct{}) {
	defer close(n.done)
	backoff := 50 * time.Millisecond
	first := true
	for {
		dc, release, ok := n.s.dial(n.addr)
		var lost <-chan error
		if ok {
			lost = dc.SetPubSubHooks(rueidis.PubSubHooks{OnMessage: n.s.onMessage, OnSubscription: n.pushed})
			n.mu.Lock()
			all := make([]string, 0, len(n.chans))
			for ch := range n.chans {
				all = append(all, ch)
			}
			n.ops = nil // all of them are subscribed below
			n.mu.Unlock()
			if n.subscribe(dc, all) {
				backoff = 50 * time.Millisecond
			}
		} else {
			n.s.refreshSoon() // a master the client does not know (yet)
		}
		if first {
			close(ready)
			first = false
		}
		if !ok {
			select {
			case <-time.After(backoff):
				backoff = min(2*backoff, 2*time.Second)
				continue
			case <-n.stop:
				return
			}
		}
	serving:
		for {
			select {
			case <-n.wake:
				n.apply(dc)
			case err := <-lost:
				release()
				n.s.fail(err)
				n.s.refreshSoon() // a failover moves the slots
				select {
				case <-time.After(backoff):
					backoff = min(2*backoff, 2*time.Second)
				case <-n.stop:
					return
				}
				break serving
			case <-n.stop:
				release()
				return
			}
		}
	}
}

// pushed sees Redis's answers and pushes about subscriptions: a
// sunsubscribe of a channel still wanted here is a master giving up its
// slot (a resharding): the slots are read again and it is subscribed
// where it lives now.
func (n *nodeSub) pushed(p rueidis.PubSubSubscription) {
	if p.Kind == "sunsubscribe" && n.addr != "" && n.s.wanted(p.Channel, n.addr) {
		n.s.refreshSoon()
	}
}

// apply carries out the changes made since the last time, in order.
func (n *nodeSub) apply(dc rueidis.DedicatedClient) {
	n.mu.Lock()
	ops := n.ops
	n.ops = nil
	n.mu.Unlock()
	var add []string
	for _, o := range ops {
		if o.add {
			add = append(add, o.channel)
			continue
		}
		if len(add) > 0 {
			n.subscribe(dc, add)
			add = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		n.s.fail(dc.Do(ctx, dc.B().Sunsubscribe().Channel(o.channel).Build()).Error())
		cancel()
	}
	n.subscribe(dc, add)
}

// subscribe subscribes to chans, a thousand at a time, and on a cluster
// one slot's channels at a time.
func (n *nodeSub) subscribe(dc rueidis.DedicatedClient, chans []string) bool {
	groups := [][]string{chans}
	if n.addr != "" {
		bySlot := map[uint16][]string{}
		for _, ch := range chans {
			slot := slotOf(ch)
			bySlot[slot] = append(bySlot[slot], ch)
		}
		groups = groups[:0]
		for _, g := range bySlot {
			groups = append(groups, g)
		}
	}
	for _, g := range groups {
		for i := 0; i < len(g); i += 1000 {
			part := g[i:min(i+1000, len(g))]
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := dc.Do(ctx, dc.B().Ssubscribe().Channel(part...).Build()).Error()
			cancel()
			if err != nil {
				n.s.fail(err)
				if n.addr != "" {
					n.s.refreshSoon() // MOVED: the slot is elsewhere now
				}
				return false
			}
			if n.s.onSubscribed != nil {
				n.s.onSubscribed(part)
			}
		}
	}
	return true
}

// slotOf is the Redis Cluster slot of a key or sharded channel: CRC16
// (XMODEM) of its hash tag (what is between the first { and the next },
// when not empty), or of the whole key, modulo 16384.
func slotOf(key string) uint16 {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc % 16384
}
