package redistest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster a test started: masters, each with its
// replicas, on free loopback ports.
type Cluster struct {
	// Nodes are every node, masters first as redis-cli assigned them
	// when the cluster was made (a failover changes who is master: see
	// Masters).
	Nodes []*Server
	t     testing.TB
}

// StartCluster starts masters × (1 + replicas) redis-servers with
// cluster mode on, joins them with `redis-cli --cluster create` and waits
// until the cluster says it is ok. Without redis-server or redis-cli on
// PATH the test is skipped with a message naming it (failed under
// AGENTSTREAM_REQUIRE_REDIS=1).
func StartCluster(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("AGENTSTREAM_REQUIRE_REDIS") == "1" {
			t.Fatal("redis-cli is not on PATH (apt-get install redis-tools)")
		}
		t.Skip("redis-cli is not on PATH (apt-get install redis-tools): skipping the Redis Cluster tests")
	}
	c := &Cluster{t: t}
	n := masters * (1 + replicas)
	addrs := make([]string, 0, n)
	for range n {
		s := StartWith(t, Options{cluster: true})
		c.Nodes = append(c.Nodes, s)
		addrs = append(addrs, s.Addr)
	}
	args := append([]string{"--cluster", "create"}, addrs...)
	args = append(args, "--cluster-replicas", fmt.Sprint(replicas), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.Await(30 * time.Second)
	return c
}

// Await waits, up to timeout, until every running node says the cluster
// is ok and every replica's link with its master is up: a replica that
// has not finished its first sync would not take over from its master
// (its data counts as too old), and a master restarted after its failover
// rejoins as a replica that must sync first.
func (c *Cluster) Await(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for _, s := range c.Nodes {
		for s.cmd != nil && !c.ok("redis-cli", s.Addr) {
			if time.Now().After(deadline) {
				c.t.Fatalf("the cluster did not become ok on %s", s.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	for _, s := range c.Nodes {
		for s.cmd != nil && !c.synced("redis-cli", s.Addr) {
			if time.Now().After(deadline) {
				c.t.Fatalf("the replica %s did not sync with its master", s.Addr)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// synced reports whether the node at addr is a master or a replica whose
// link with its master is up.
func (c *Cluster) synced(cli, addr string) bool {
	info := ask(cli, addr, "info", "replication")
	return strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")
}

// ok reports whether the node at addr says the cluster is ok and knows
// every node.
func (c *Cluster) ok(cli, addr string) bool {
	info := ask(cli, addr, "cluster", "info")
	return strings.Contains(info, "cluster_state:ok") && strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(c.Nodes)))
}

// ask is redis-cli's answer to a command sent to the node at addr, ""
// when it cannot be had.
func ask(cli, addr string, args ...string) string {
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(cli, append([]string{"-h", host, "-p", port}, args...)...).Output()
	if err != nil {
		return ""
	}
	return string(out)
}

// URL is the cluster's redis:// URL: every node as a seed, comma
// separated.
func (c *Cluster) URL() string {
	addrs := make([]string, len(c.Nodes))
	for i, s := range c.Nodes {
		addrs[i] = s.Addr
	}
	return "redis://" + strings.Join(addrs, ",")
}

// Masters is the nodes that are masters now (as their own INFO says).
func (c *Cluster) Masters() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if s.cmd == nil {
			continue
		}
		if strings.Contains(ask("redis-cli", s.Addr, "info", "replication"), "role:master") {
			out = append(out, s)
		}
	}
	return out
}

// NodeID is the cluster's id of the node at s.
func (c *Cluster) NodeID(s *Server) string {
	return strings.TrimSpace(ask("redis-cli", s.Addr, "cluster", "myid"))
}

// MoveSlot moves one slot from the master from to the master to, as
// a resharding does, step by step: the slot is marked importing on to and
// migrating on from, then, after pause (commands for the slot's keys are
// answered ASK meanwhile, once a key has moved), its keys are migrated
// and the slot is given to to on every master.
func (c *Cluster) MoveSlot(slot int, from, to *Server, pause time.Duration) {
	c.t.Helper()
	s := fmt.Sprint(slot)
	fromID, toID := c.NodeID(from), c.NodeID(to)
	must := func(addr string, args ...string) string {
		c.t.Helper()
		out := ask("redis-cli", addr, args...)
		if strings.HasPrefix(out, "ERR") || out == "" {
			c.t.Fatalf("redis-cli %v on %s: %q", args, addr, out)
		}
		return out
	}
	must(to.Addr, "cluster", "setslot", s, "importing", fromID)
	must(from.Addr, "cluster", "setslot", s, "migrating", toID)
	time.Sleep(pause)
	_, port, _ := net.SplitHostPort(to.Addr)
	for {
		keys := strings.Fields(ask("redis-cli", from.Addr, "cluster", "getkeysinslot", s, "100"))
		if len(keys) == 0 {
			break
		}
		must(from.Addr, append([]string{"migrate", "127.0.0.1", port, "", "0", "5000", "KEYS"}, keys...)...)
	}
	for _, m := range c.Masters() {
		must(m.Addr, "cluster", "setslot", s, "node", toID)
	}
}
