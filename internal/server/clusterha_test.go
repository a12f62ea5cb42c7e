package server

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// haRig is two instances, a and b, sharing state through a Redis that
// is several servers, with the users ivy (a quota of ivyQuota requests),
// bob, carol and dave.
type haRig struct {
	t      *testing.T
	nodes  [2]*clusterNode
	origin *proxytest.Origin
	echo   *proxytest.EchoServer
	ivy    map[*clusterNode]*http.Client
}

// ivyQuota is ivy's requests per day in the haRig.
const ivyQuota = 10

func startHARig(t *testing.T, redis config.Cluster, modify func(c *config.Config)) *haRig {
	t.Helper()
	r := &haRig{t: t, origin: proxytest.NewOrigin(t, proxytest.Respond(200, "ok")), echo: proxytest.NewEcho(t)}
	r.nodes = startCluster(t, redis, func(c *config.Config) {
		c.Quota.Rules = append(c.Quota.Rules, config.QuotaRule{Name: "ivy-requests", Who: config.Who{Users: []string{"ivy"}}, Requests: ivyQuota})
		if modify != nil {
			modify(c)
		}
		c.SetDefaults()
	}, "ivy", "bob", "carol", "dave")
	// One client per instance: one connection each, within the per-user
	// connection limit.
	r.ivy = map[*clusterNode]*http.Client{r.nodes[0]: r.nodes[0].client("ivy"), r.nodes[1]: r.nodes[1].client("ivy")}
	return r
}

// get makes one of ivy's requests through n and returns its status.
func (r *haRig) get(n *clusterNode) int {
	r.t.Helper()
	resp, err := r.ivy[n].Get(r.origin.URL("/"))
	if err != nil {
		r.t.Fatalf("ivy's request through %s: %v", n.cfg.Cluster.Instance, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// grant makes k of ivy's requests through n, each of which must succeed.
func (r *haRig) grant(n *clusterNode, k int) {
	r.t.Helper()
	for i := range k {
		if code := r.get(n); code != 200 {
			r.t.Fatalf("ivy's request %d of %d through %s: %d, want 200", i+1, k, n.cfg.Cluster.Instance, code)
		}
	}
}

// ivyUsed waits until both instances count want of ivy's requests (and
// their last sync succeeded).
func (r *haRig) ivyUsed(want int64) {
	r.t.Helper()
	waitFor(r.t, "both instances to count ivy's requests", func() bool {
		for _, n := range r.nodes {
			if q := n.s.Quota("ivy"); len(q) != 1 || q[0].RequestsUsed != want || proxytest.Metric(r.t, n.m, "rustle_cluster_redis_up") != 1 {
				return false
			}
		}
		return true
	})
}

// spend makes ivy's requests through a until one is refused, which must
// be after exactly left; then b, once it has read the total, refuses
// her too.
func (r *haRig) spend(left int) {
	r.t.Helper()
	a, b := r.nodes[0], r.nodes[1]
	ok := 0
	for range left + 5 {
		code := r.get(a)
		if code == http.StatusTooManyRequests {
			break
		}
		if code != 200 {
			r.t.Fatalf("ivy's request through a: %d", code)
		}
		ok++
	}
	if ok != left {
		r.t.Errorf("%d more of ivy's requests succeeded through a, want %d (the rest of her quota of %d)", ok, left, ivyQuota)
	}
	r.ivyUsed(ivyQuota)
	if code := r.get(b); code != http.StatusTooManyRequests {
		r.t.Errorf("ivy's request through b past her quota: %d, want 429", code)
	}
}

// tunnel opens a tunnel of user through n to the echo server and checks
// that it echoes.
func (r *haRig) tunnel(n *clusterNode, user string) net.Conn {
	r.t.Helper()
	c, code := n.connect(r.t, r.echo.Addr, user)
	if code != 200 {
		r.t.Fatalf("%s's tunnel through %s: %d", user, n.cfg.Cluster.Instance, code)
	}
	if _, err := c.Write([]byte("x")); err != nil {
		r.t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		r.t.Fatalf("%s's tunnel through %s: echo: %v", user, n.cfg.Cluster.Instance, err)
	}
	return c
}

// cut checks that the tunnel c of user is cut within 10 seconds.
func (r *haRig) cut(c net.Conn, user string) {
	r.t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		r.t.Errorf("%s's tunnel on b: read %d, %v; want it cut by the revocation on a\na's log:\n%s\nb's log:\n%s",
			user, n, err, r.nodes[0].log.String(), r.nodes[1].log.String())
	}
}

// redisUp waits until both instances' rustle_cluster_redis_up is want.
func (r *haRig) redisUp(want float64) {
	r.t.Helper()
	waitFor(r.t, "both instances' rustle_cluster_redis_up to be "+map[float64]string{0: "0", 1: "1"}[want], func() bool {
		for _, n := range r.nodes {
			if proxytest.Metric(r.t, n.m, "rustle_cluster_redis_up") != want {
				return false
			}
		}
		return true
	})
}

// TestClusterSentinelFailover checks two instances sharing their state
// through the master a set of Sentinels watches (docs/operations.md,
// "Running several instances"), as the master fails over: killed (the
// instances count locally until the Sentinels promote the replica), or
// moved by SENTINEL FAILOVER. ivy's requests counted before it (and
// replicated) and while it lasts reach the new master; her quota holds
// across both instances after it; bob's connections on a count on b
// again; a revocation made while Redis was down, and one made after,
// cut the user's tunnel on b.
func TestClusterSentinelFailover(t *testing.T) {
	const usedBefore = 4
	for _, tt := range []struct {
		name   string
		killed bool // the master is killed, not failed over by a Sentinel
	}{
		{"master killed", true},
		{"SENTINEL FAILOVER", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rs := proxytest.StartRedisSentinel(t)
			r := startHARig(t, config.Cluster{Sentinels: rs.Sentinels, MasterName: proxytest.SentinelMaster}, nil)
			a, b := r.nodes[0], r.nodes[1]
			r.grant(a, usedBefore/2)
			r.grant(b, usedBefore/2)
			r.ivyUsed(usedBefore)
			for range 2 {
				r.tunnel(a, "bob")
			}
			waitFor(t, "b to see bob's 2 tunnels on a", func() bool { return b.s.shared.cluster.Others("bob") == 2 })
			carol, dave := r.tunnel(b, "carol"), r.tunnel(b, "dave")
			rs.WaitReplicated()

			during := 0
			var old string
			if tt.killed {
				old = rs.KillMaster()
				r.redisUp(0)
				// Counted on each instance while there is no master.
				r.grant(a, 2)
				r.grant(b, 1)
				during = 3
				if _, err := a.s.RevokeUser("dave"); err == nil {
					t.Error("RevokeUser(dave) with no master: no error; want one saying it is sent again")
				}
			} else {
				old = rs.Failover()
			}
			start := time.Now()
			rs.WaitFailover(old)
			r.ivyUsed(int64(usedBefore + during))
			t.Logf("the master at %s failed over to %s; both instances synced %v after the Sentinels started it",
				old, rs.Master().Addr, time.Since(start))
			waitFor(t, "b to see bob's 2 tunnels on a through the new master", func() bool {
				return b.s.shared.cluster.Others("bob") == 2
			})
			if tt.killed {
				r.cut(dave, "dave") // revoked while Redis was down, sent since
			}
			revoke(t, a, "carol")
			r.cut(carol, "carol")
			r.spend(ivyQuota - usedBefore - during)
		})
	}
}

// TestClusterRedisCluster checks two instances sharing their state
// through a Redis Cluster of three nodes, a knowing one of them, b all
// three: ivy's quota holds across both instances, bob's connection
// limit across both, a revocation on a cuts carol's tunnel on b, and
// rustle's keys are spread over the nodes (each call touches one key:
// nothing needs two keys on one node).
func TestClusterRedisCluster(t *testing.T) {
	rc := proxytest.StartRedisCluster(t, 3)
	r := startHARig(t, config.Cluster{Nodes: rc.Addrs()}, func(c *config.Config) {
		if c.Cluster.Instance == "a" {
			c.Cluster.Nodes = c.Cluster.Nodes[:1] // the others are found
		}
	})
	a, b := r.nodes[0], r.nodes[1]
	r.grant(a, 2)
	r.grant(b, 2)
	r.ivyUsed(4)

	var held []net.Conn
	for i := range clusterConnsLimit {
		held = append(held, r.tunnel(r.nodes[i%2], "bob"))
	}
	waitFor(t, "each instance to see the other's 2 tunnels of bob", func() bool {
		return a.s.shared.cluster.Others("bob") == 2 && b.s.shared.cluster.Others("bob") == 2
	})
	for _, n := range r.nodes {
		if _, code := n.connect(t, r.echo.Addr, "bob"); code != http.StatusTooManyRequests {
			t.Errorf("bob's fifth tunnel, through %s: %d, want 429", n.cfg.Cluster.Instance, code)
		}
	}
	held[0].Close()

	carol := r.tunnel(b, "carol")
	revoke(t, a, "carol")
	r.cut(carol, "carol")

	r.spend(ivyQuota - 4)
	perNode := rc.KeysPerNode("rustle:*")
	spread := 0
	for _, k := range perNode {
		if k > 0 {
			spread++
		}
	}
	t.Logf("rustle's keys per node: %v", perNode)
	if spread < 2 {
		t.Errorf("rustle's keys per node: %v; want them on at least two nodes", perNode)
	}
}

// TestClusterRedisClusterNodeDown checks a sync that fails in part: one
// node of a Redis Cluster (one that lets the others serve their slots:
// cluster-require-full-coverage no) is killed, and the counts of the
// users whose keys live on the others are confirmed once, not sent
// again at every sync (which added them to the totals again and again).
func TestClusterRedisClusterNodeDown(t *testing.T) {
	rc := proxytest.StartRedisCluster(t, 3, "--cluster-require-full-coverage", "no")
	users := []string{"u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7"}
	nodes := startCluster(t, config.Cluster{Nodes: rc.Addrs()}, func(c *config.Config) {
		c.Quota.Rules = append(c.Quota.Rules, config.QuotaRule{Name: "all", Who: config.Who{Users: []string{"*"}}, Requests: 1000})
		c.SetDefaults()
	}, users...)
	a := nodes[0]
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	clients := make(map[string]*http.Client)
	request := func(user string) {
		t.Helper()
		if clients[user] == nil {
			clients[user] = a.client(user)
		}
		resp, err := clients[user].Get(origin.URL("/"))
		if err != nil {
			t.Fatalf("%s's request through a: %v", user, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("%s's request through a: %d", user, resp.StatusCode)
		}
	}
	// requests returns each user's total in Redis and the node its key
	// is on.
	requests := func() (map[string]int, map[string]int) {
		total, node := make(map[string]int), make(map[string]int)
		for i, keys := range rc.Keys("rustle:quota:all:*") {
			for _, k := range keys {
				user := strings.Split(k, ":")[3]
				v, err := proxytest.RedisDo(rc.Nodes[i].Addr, "HGET", k, "requests")
				if err != nil {
					continue
				}
				total[user], _ = strconv.Atoi(fmt.Sprint(v))
				node[user] = i
			}
		}
		return total, node
	}
	for _, u := range users {
		request(u)
	}
	var where map[string]int
	waitFor(t, "every user's request in Redis", func() bool {
		var total map[string]int
		total, where = requests()
		for _, u := range users {
			if total[u] != 1 {
				return false
			}
		}
		return true
	})
	victim := where[users[0]]
	var survivors []string
	for _, u := range users {
		if where[u] != victim {
			survivors = append(survivors, u)
		}
	}
	if len(survivors) == 0 {
		t.Fatalf("every user's key is on one node: %v", where)
	}
	rc.Nodes[victim].Kill()
	for _, u := range users {
		request(u)
	}
	waitFor(t, "a to see the sync fail", func() bool { return proxytest.Metric(t, a.m, "rustle_cluster_redis_up") == 0 })
	// Over 20 sync intervals, with a's syncs failing on the killed node,
	// the others' totals reach 2 and stay there.
	deadline := time.Now().Add(20 * clusterSync)
	for time.Now().Before(deadline) {
		total, _ := requests()
		for _, u := range survivors {
			if total[u] > 2 {
				t.Fatalf("%s's total in Redis: %d after 2 requests, with node %d down: its counts were sent more than once", u, total[u], victim)
			}
		}
		time.Sleep(clusterSync / 4)
	}
	total, _ := requests()
	for _, u := range survivors {
		if total[u] != 2 {
			t.Errorf("%s's total in Redis: %d, want 2", u, total[u])
		}
	}
}
