package proxytest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// SentinelMaster is the name the Sentinels of StartRedisSentinel know
// their master by.
const SentinelMaster = "rustle"

// RedisSentinel is a Redis master, its replica and three Sentinels
// watching them (quorum 2, a master down after 1 s), each a redis-server
// on a loopback port of its own, without persistence.
type RedisSentinel struct {
	// Sentinels are the Sentinels' host:port addresses.
	Sentinels []string

	t       testing.TB
	servers []*Redis // the master and the replica, in any role since
	sents   []*Redis
}

// StartRedisSentinel starts a master, a replica of it and three
// Sentinels, and waits until the replica is in sync and every Sentinel
// knows the replica and the other Sentinels (so that a failover can
// happen); all are stopped by t.Cleanup. It skips the test without
// redis-server (fails under CI: see RequireTool).
func StartRedisSentinel(t testing.TB) *RedisSentinel {
	t.Helper()
	s := &RedisSentinel{t: t}
	master := StartRedis(t)
	replica := startRedis(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "", "--replicaof", "127.0.0.1", port(master.Addr))
	s.servers = []*Redis{master, replica}
	mport := port(master.Addr)
	for range 3 {
		dir := t.TempDir()
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %[1]s 127.0.0.1 %[2]s 2\n"+
			"sentinel down-after-milliseconds %[1]s 1000\n"+
			"sentinel failover-timeout %[1]s 5000\n"+
			"sentinel parallel-syncs %[1]s 1\n", SentinelMaster, mport)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		sn := startRedis(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), conf)
		s.sents = append(s.sents, sn)
		s.Sentinels = append(s.Sentinels, sn.Addr)
	}
	s.waitFor("the replica to sync", 20*time.Second, func() bool {
		return strings.Contains(info(replica.Addr, "replication"), "master_link_status:up")
	})
	s.waitFor("every Sentinel to know the replica and the other Sentinels", 30*time.Second, func() bool {
		for _, sn := range s.Sentinels {
			others, err := RedisDo(sn, "SENTINEL", "SENTINELS", SentinelMaster)
			if l, _ := others.([]any); err != nil || len(l) != 2 {
				return false
			}
			replicas, err := RedisDo(sn, "SENTINEL", "REPLICAS", SentinelMaster)
			if l, _ := replicas.([]any); err != nil || len(l) != 1 {
				return false
			}
		}
		return true
	})
	return s
}

// Master returns the server the Sentinels say is the master now.
func (s *RedisSentinel) Master() *Redis {
	s.t.Helper()
	addr := s.masterAddr()
	for _, r := range s.servers {
		if r.Addr == addr {
			return r
		}
	}
	s.t.Fatalf("proxytest: the Sentinels name %q master, none of the servers", addr)
	return nil
}

// masterAddr returns the master's address as the first Sentinel that
// answers says; "" when none does.
func (s *RedisSentinel) masterAddr() string {
	for _, sn := range s.Sentinels {
		v, err := RedisDo(sn, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
		if l, _ := v.([]any); err == nil && len(l) == 2 {
			return fmt.Sprintf("%v:%v", l[0], l[1])
		}
	}
	return ""
}

// WaitReplicated waits until the replica has applied everything the
// master took so far, so that a failover loses nothing.
func (s *RedisSentinel) WaitReplicated() {
	s.t.Helper()
	master := s.Master()
	want := infoField(info(master.Addr, "replication"), "master_repl_offset")
	s.waitFor("the replica to catch up with the master", 10*time.Second, func() bool {
		for _, r := range s.servers {
			if r != master && infoField(info(r.Addr, "replication"), "slave_repl_offset") >= want {
				return true
			}
		}
		return false
	})
}

// KillMaster kills the master (SIGKILL) and returns its address.
func (s *RedisSentinel) KillMaster() string {
	s.t.Helper()
	m := s.Master()
	m.Kill()
	return m.Addr
}

// Failover asks a Sentinel to fail the master over (SENTINEL FAILOVER:
// its replica becomes the master, the master its replica) and returns
// the old master's address.
func (s *RedisSentinel) Failover() string {
	s.t.Helper()
	old := s.Master().Addr
	if _, err := RedisDo(s.Sentinels[0], "SENTINEL", "FAILOVER", SentinelMaster); err != nil {
		s.t.Fatal(err)
	}
	return old
}

// WaitFailover waits until every Sentinel names a master other than old,
// and that master says it is one.
func (s *RedisSentinel) WaitFailover(old string) {
	s.t.Helper()
	s.waitFor("the Sentinels to fail the master over", 30*time.Second, func() bool {
		var addr string
		for _, sn := range s.Sentinels {
			v, err := RedisDo(sn, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SentinelMaster)
			l, _ := v.([]any)
			if err != nil || len(l) != 2 {
				return false
			}
			a := fmt.Sprintf("%v:%v", l[0], l[1])
			if a == old || (addr != "" && a != addr) {
				return false
			}
			addr = a
		}
		return strings.Contains(info(addr, "replication"), "role:master")
	})
}

// waitFor polls cond until it holds, failing the test after limit.
func (s *RedisSentinel) waitFor(what string, limit time.Duration, cond func() bool) {
	s.t.Helper()
	waitRedis(s.t, what, limit, cond)
}

// RedisCluster is a Redis Cluster of nodes without replicas, each a
// redis-server on a loopback port of its own (and its bus port, 10,000
// above), without persistence, made with redis-cli --cluster create.
type RedisCluster struct {
	// Nodes are the nodes, whose Addr are their host:port addresses.
	Nodes []*Redis
}

// StartRedisCluster starts n nodes (at least 3), with the further
// redis-server options args, makes them a Redis Cluster with redis-cli
// --cluster create (the slots shared out, no replicas), and waits until
// every node says the cluster is ok; the nodes are stopped by t.Cleanup.
// It skips the test without redis-server or redis-cli (fails under CI:
// see RequireTool).
func StartRedisCluster(t testing.TB, n int, args ...string) *RedisCluster {
	t.Helper()
	cli := RequireTool(t, "redis-cli", "redis-tools")
	c := &RedisCluster{}
	create := []string{"--cluster", "create"}
	for range n {
		r := startRedis(t, freeBusPort(t), "", append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000"}, args...)...)
		c.Nodes = append(c.Nodes, r)
		create = append(create, r.Addr)
	}
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput()
	if err != nil {
		t.Fatalf("proxytest: redis-cli --cluster create: %v\n%s", err, out)
	}
	waitRedis(t, "every node to say the cluster is ok", 30*time.Second, func() bool {
		for _, r := range c.Nodes {
			v, err := RedisDo(r.Addr, "CLUSTER", "INFO")
			if ci := fmt.Sprint(v); err != nil || !strings.Contains(ci, "cluster_state:ok") ||
				!strings.Contains(ci, "cluster_slots_ok:16384") || !strings.Contains(ci, fmt.Sprintf("cluster_known_nodes:%d", n)) {
				return false
			}
		}
		return true
	})
	return c
}

// Addrs returns the nodes' host:port addresses.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, r := range c.Nodes {
		out[i] = r.Addr
	}
	return out
}

// Keys returns the keys whose names match pattern on each node (KEYS
// on each node: for a test's few keys); none on a node that does not
// answer.
func (c *RedisCluster) Keys(pattern string) [][]string {
	out := make([][]string, len(c.Nodes))
	for i, r := range c.Nodes {
		v, _ := RedisDo(r.Addr, "KEYS", pattern)
		l, _ := v.([]any)
		for _, k := range l {
			out[i] = append(out[i], fmt.Sprint(k))
		}
	}
	return out
}

// KeysPerNode returns how many keys each node holds whose names match
// pattern (KEYS on each node: for a test's few keys).
func (c *RedisCluster) KeysPerNode(pattern string) []int {
	out := make([]int, len(c.Nodes))
	for i, r := range c.Nodes {
		if l, ok := r.Do("KEYS", pattern).([]any); ok {
			out[i] = len(l)
		}
	}
	return out
}

// info returns section of INFO of the server at addr ("" = the default
// sections); "" when it does not answer.
func info(addr, section string) string {
	args := []any{"INFO"}
	if section != "" {
		args = append(args, section)
	}
	v, err := RedisDo(addr, args...)
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	return s
}

// infoField returns the number of field in an INFO text; -1 when it is
// not there.
func infoField(text, field string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	return -1
}

// port returns the port of a host:port.
func port(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// waitRedis polls cond every 20 ms until it holds, failing t after
// limit.
func waitRedis(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("proxytest: timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
