package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// The cluster rig's settings.
const (
	clusterSync       = 100 * time.Millisecond
	clusterQuota      = 10 << 20 // alice's daily bytes
	clusterDownload   = 256 << 10
	clusterRate       = 4 << 20 // alice's bytes per second on each instance
	clusterRateBurst  = 64 << 10
	clusterConnsLimit = 4
)

// clusterOvershoot is the most the documented bound (docs/operations.md,
// "Running several instances") lets alice's downloads pass her quota in
// the rig: what she moves through the other instance in one sync
// interval (paced at clusterRate, with a burst), and a download in
// flight on each instance.
const clusterOvershoot = clusterRate*int64(clusterSync)/int64(time.Second) + clusterRateBurst + 2*clusterDownload

// clusterNode is one instance of the rig.
type clusterNode struct {
	s    *Server
	cfg  *config.Config
	addr string
	log  *logBuffer
	m    *metrics.Metrics
}

// oneRedis is the [cluster] of the Redis server at url.
func oneRedis(url string) config.Cluster { return config.Cluster{Redis: url} }

// clusterConfig is the configuration of instance name of the rig, whose
// Redis is redis's (one server, Sentinels or nodes).
func clusterConfig(t *testing.T, name string, redis config.Cluster, users ...string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.1/32"}
	for _, u := range users {
		cfg.Auth.Users = append(cfg.Auth.Users, config.User{Name: u, Password: "pw"})
	}
	cfg.Limits.MaxConnectionsPerUser = clusterConnsLimit
	cfg.Limits.UserBytesPerSecond = 0
	cfg.Quota.Rules = []config.QuotaRule{
		{Name: "alice-daily", Who: config.Who{Users: []string{"alice"}}, Bytes: clusterQuota},
		{Name: "erin-requests", Who: config.Who{Users: []string{"erin"}}, Requests: 1 << 40},
	}
	cfg.Cluster = redis
	cfg.Cluster.Instance = name
	cfg.Cluster.SyncInterval.Duration = clusterSync
	cfg.Cluster.Timeout.Duration = 200 * time.Millisecond
	cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0", Protocol: "http"}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// startCluster starts two instances, a and b, sharing the Redis of
// redis, with users.
func startCluster(t *testing.T, redis config.Cluster, modify func(c *config.Config), users ...string) [2]*clusterNode {
	t.Helper()
	var nodes [2]*clusterNode
	for i, name := range []string{"a", "b"} {
		n := &clusterNode{cfg: clusterConfig(t, name, redis, users...), log: &logBuffer{},
			m: metrics.New(metrics.Config{PerUser: true})}
		if modify != nil {
			modify(n.cfg)
		}
		logger := slog.New(slog.NewTextHandler(n.log, nil))
		var addrs map[string]string
		n.s, addrs = startLogged(t, n.cfg, logger, &logBuffer{}, WithMetrics(n.m))
		n.s.RegisterMetrics(n.m)
		n.addr = addrs["plain"]
		nodes[i] = n
	}
	return nodes
}

// client returns an HTTP client that goes through the instance as user.
func (n *clusterNode) client(user string) *http.Client {
	proxy := &url.URL{Scheme: "http", User: url.UserPassword(user, "pw"), Host: n.addr}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
}

// connect opens a CONNECT tunnel to target through the instance as user
// and returns it with the status answered.
func (n *clusterNode) connect(t *testing.T, target, user string) (net.Conn, int) {
	t.Helper()
	c, err := net.DialTimeout("tcp", n.addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\nProxy-Authorization: %s\r\n\r\n", target, target, basicValue(user, "pw"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("CONNECT through %s: %v", n.cfg.Cluster.Instance, err)
	}
	c.SetReadDeadline(time.Time{})
	return c, resp.StatusCode
}

// TestClusterQuota checks that a daily byte quota of 10 MB, consumed
// through both instances, is enforced across them within the documented
// overshoot: alone, each instance would let 10 MB through.
func TestClusterQuota(t *testing.T) {
	redis := proxytest.StartRedis(t)
	origin := proxytest.NewOrigin(t, proxytest.Bulk(clusterDownload, proxytest.ByLength))
	nodes := startCluster(t, oneRedis(redis.URL()), func(c *config.Config) {
		c.Limits.UserBytesPerSecond, c.Limits.UserBytesBurst = clusterRate, clusterRateBurst
	}, "alice")
	clients := [2]*http.Client{nodes[0].client("alice"), nodes[1].client("alice")}
	var total int64
	refused := [2]bool{}
	for i := 0; !refused[0] || !refused[1]; i++ {
		if total > 3*clusterQuota {
			t.Fatalf("%d bytes downloaded: the quota of %d is not enforced", total, clusterQuota)
		}
		k := i % 2
		resp, err := clients[k].Get(origin.URL("/bulk"))
		if err != nil {
			t.Fatalf("download %d through %s: %v", i, nodes[k].cfg.Cluster.Instance, err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			refused[k] = true
		case resp.StatusCode == http.StatusOK && err != nil && !refused[k]:
			// Cut as it crossed the quota (the other instance's bytes
			// may have spent it meanwhile): the next is refused.
			total += n
		case resp.StatusCode != http.StatusOK || err != nil:
			t.Fatalf("download %d through %s: %s, %v", i, nodes[k].cfg.Cluster.Instance, resp.Status, err)
		case refused[k]:
			// The other instance's bytes pushed this one's view under
			// the quota? Totals only grow within a window.
			t.Fatalf("download %d through %s granted after a refusal", i, nodes[k].cfg.Cluster.Instance)
		default:
			total += n
		}
	}
	t.Logf("downloaded %d bytes through both instances for a quota of %d (overshoot allowed %d)", total, clusterQuota, clusterOvershoot)
	if total < clusterQuota || total > clusterQuota+clusterOvershoot {
		t.Errorf("downloaded %d bytes; want at least the quota %d and at most %d past it", total, clusterQuota, clusterOvershoot)
	}
	// Both instances read the same total back.
	waitFor(t, "both instances to show the total", func() bool {
		a, b := nodes[0].s.Quota("alice"), nodes[1].s.Quota("alice")
		return len(a) == 1 && len(b) == 1 && a[0].BytesUsed == b[0].BytesUsed && a[0].BytesUsed >= total
	})
	if v := proxytest.Metric(t, nodes[0].m, "rustle_quota_used", "rule", "alice-daily", "scope", "alice", "kind", "bytes"); v < float64(total) {
		t.Errorf("rustle_quota_used = %v, want at least %d", v, total)
	}
}

// TestClusterConnectionLimit checks that a limit of 4 connections per
// user holds across both instances.
func TestClusterConnectionLimit(t *testing.T) {
	redis := proxytest.StartRedis(t)
	echo := proxytest.NewEcho(t)
	nodes := startCluster(t, oneRedis(redis.URL()), nil, "bob")
	var held []net.Conn
	for i := range clusterConnsLimit {
		c, code := nodes[i%2].connect(t, echo.Addr, "bob")
		if code != 200 {
			t.Fatalf("tunnel %d of bob: %d", i, code)
		}
		held = append(held, c)
	}
	waitFor(t, "each instance to see the other's 2 tunnels of bob", func() bool {
		return nodes[0].s.shared.cluster.Others("bob") == 2 && nodes[1].s.shared.cluster.Others("bob") == 2
	})
	for _, n := range nodes {
		if _, code := n.connect(t, echo.Addr, "bob"); code != http.StatusTooManyRequests {
			t.Errorf("bob's fifth tunnel, through %s: %d, want 429", n.cfg.Cluster.Instance, code)
		}
	}
	held[0].Close() // one of a's
	waitFor(t, "b to see that a holds one tunnel of bob", func() bool {
		return nodes[1].s.shared.cluster.Others("bob") == 1
	})
	if _, code := nodes[1].connect(t, echo.Addr, "bob"); code != 200 {
		t.Errorf("bob's fourth tunnel again, through b: %d, want 200", code)
	}
}

// TestClusterRevocation checks that a user revoked on one instance, by an
// admin call or by a reload that removes it, has its tunnels on the
// other cut within a few seconds.
func TestClusterRevocation(t *testing.T) {
	redis := proxytest.StartRedis(t)
	echo := proxytest.NewEcho(t)
	nodes := startCluster(t, oneRedis(redis.URL()), nil, "carol", "dave")
	a, b := nodes[0], nodes[1]
	for _, tt := range []struct {
		user   string
		revoke func(t *testing.T)
	}{
		{"carol", func(t *testing.T) {
			revoke(t, a, "carol")
		}},
		{"dave", func(t *testing.T) {
			next := clusterConfig(t, "a", oneRedis(redis.URL()), "carol") // dave removed
			if err := a.s.Reload(next); err != nil {
				t.Fatalf("Reload: %v", err)
			}
		}},
	} {
		t.Run(tt.user, func(t *testing.T) {
			c, code := b.connect(t, echo.Addr, tt.user)
			if code != 200 {
				t.Fatalf("%s's tunnel through b: %d", tt.user, code)
			}
			if _, err := c.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				t.Fatalf("tunnel echo: %v", err)
			}
			waitFor(t, "b to hold the tunnel", func() bool { return b.s.revoked.Users() > 0 })
			start := time.Now()
			tt.revoke(t)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
				t.Fatalf("%s's tunnel on b after the revocation on a: read %d, %v; want it cut\na's log:\n%s\nb's log:\n%s", tt.user, n, err, a.log.String(), b.log.String())
			}
			t.Logf("%s's tunnel on b cut %v after the revocation on a", tt.user, time.Since(start))
			waitFor(t, "b's log of the revocation", func() bool {
				return strings.Contains(b.log.String(), "access revoked by another instance")
			})
		})
	}
}

// revoke revokes user on n. A loaded machine may make Redis take the
// revocation later than the cluster's timeout (200ms in these tests):
// RevokeUser then returns the timeout and the revocation is sent again
// at each sync, which the caller's check that the tunnel is cut proves.
// Any other error fails the test.
func revoke(t *testing.T, n *clusterNode, user string) {
	t.Helper()
	_, err := n.s.RevokeUser(user)
	var ne net.Error
	switch {
	case err == nil:
	case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
		t.Logf("RevokeUser(%s) on %s: %v (sent again at the next sync)", user, n.cfg.Cluster.Instance, err)
	default:
		t.Errorf("RevokeUser(%s) on %s: %v", user, n.cfg.Cluster.Instance, err)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// TestClusterRedisDown checks that Redis killed and restarted under load
// fails no request (nothing on the request path waits for Redis), that
// each instance logs each transition once (see checkTransitions) and
// shows it in
// rustle_cluster_redis_up, and that what was counted meanwhile reaches
// the shared totals once Redis is back.
func TestClusterRedisDown(t *testing.T) {
	redis := proxytest.StartRedis(t)
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	nodes := startCluster(t, oneRedis(redis.URL()), nil, "erin")
	up := func(want float64) func() bool {
		return func() bool {
			for _, n := range nodes {
				if proxytest.Metric(t, n.m, "rustle_cluster_redis_up") != want {
					return false
				}
			}
			return true
		}
	}
	waitFor(t, "both instances synced", up(1))

	var ok, failed atomic.Int64
	var slowest atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, n := range nodes {
		cl := n.client("erin")
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				resp, err := cl.Get(origin.URL("/load"))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				if d := int64(time.Since(t0)); d > slowest.Load() {
					slowest.Store(d)
				}
				if err != nil || resp.StatusCode != 200 {
					failed.Add(1)
					continue
				}
				ok.Add(1)
			}
		})
	}
	waitFor(t, "requests under way", func() bool { return ok.Load() > 20 })
	redis.Kill()
	waitFor(t, "both instances to see Redis down", up(0))
	during, downAt := ok.Load(), time.Now()
	// Several syncs fail meanwhile: a warning logged on each would show.
	waitFor(t, "requests while Redis is down", func() bool {
		return ok.Load() > during+50 && time.Since(downAt) > 5*clusterSync
	})
	redis.Start()
	waitFor(t, "both instances to see Redis back", up(1))
	after := ok.Load()
	waitFor(t, "requests after Redis is back", func() bool { return ok.Load() > after+20 })
	close(stop)
	wg.Wait()

	if failed.Load() != 0 {
		t.Errorf("%d requests failed (of %d)", failed.Load(), ok.Load()+failed.Load())
	}
	// A bound for a request stuck on Redis, not a latency target: a
	// loaded CI machine can take a second over a request.
	if d := time.Duration(slowest.Load()); d > 3*time.Second {
		t.Errorf("the slowest request took %v: something waited for Redis", d)
	}
	for _, n := range nodes {
		checkTransitions(t, n.cfg.Cluster.Instance, n.log.String())
	}
	// Redis restarted empty: the totals are what each instance counted
	// since its last sync before the kill... and every request since. The
	// requests counted while Redis was down reached it: both instances
	// agree, and hold at least those made since the restart began.
	total := ok.Load()
	waitFor(t, "both instances to agree on erin's requests", func() bool {
		a, b := nodes[0].s.Quota("erin"), nodes[1].s.Quota("erin")
		return len(a) == 1 && len(b) == 1 && a[0].RequestsUsed == b[0].RequestsUsed && a[0].RequestsUsed >= total-during
	})
}

// checkTransitions checks an instance's log of a Redis outage: the
// warning that Redis is unreachable, then that it is reachable again,
// each logged on a transition, not on each request or sync. A loaded
// machine may make a sync to the restarted Redis time out (the test's
// timeout is 200ms), a second outage as far as the instance can tell:
// the pair may come again, but only as pairs, in turn, and a few times
// at most (one per sync would be far more: a sync each 100ms).
func checkTransitions(t *testing.T, instance, log string) {
	t.Helper()
	var seq []string
	for line := range strings.Lines(log) {
		switch {
		case strings.Contains(line, "Redis unreachable"):
			seq = append(seq, "unreachable")
		case strings.Contains(line, "Redis reachable again"):
			seq = append(seq, "reachable again")
		}
	}
	ok := len(seq) >= 2 && len(seq)%2 == 0 && len(seq) <= 2*maxOutages
	for i, s := range seq {
		if want := [2]string{"unreachable", "reachable again"}[i%2]; s != want {
			ok = false
		}
	}
	if !ok {
		t.Errorf("instance %s logged %q; want \"unreachable\" then \"reachable again\", in turn, 1 to %d times:\n%s",
			instance, seq, maxOutages, log)
	} else if len(seq) > 2 {
		t.Logf("instance %s: Redis seen down %d times (a sync timed out under load)", instance, len(seq)/2)
	}
}

// maxOutages is how many times checkTransitions lets an instance see
// the one outage of Redis and its return.
const maxOutages = 5

// TestClusterOutageQuota checks the documented bound of a Redis outage
// (docs/operations.md, "Running several instances"): while Redis is down
// or hung, a user can move up to its quota on each instance from the
// last totals. gina has used 2 of her 6 requests through the cluster;
// Redis is then killed, or stopped (SIGSTOP: a hung server, whose calls
// wait out their timeout), and a stream of her requests through one
// instance over several sync intervals gets at most 4 through; that
// instance's own count agrees with what it answered.
func TestClusterOutageQuota(t *testing.T) {
	const quota, usedBefore = 6, 2
	for _, tt := range []struct {
		name   string
		outage func(r *proxytest.Redis)
	}{
		{"killed", (*proxytest.Redis).Kill},
		{"hung", (*proxytest.Redis).Stop},
	} {
		t.Run(tt.name, func(t *testing.T) {
			redis := proxytest.StartRedis(t)
			origin := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
			nodes := startCluster(t, oneRedis(redis.URL()), func(c *config.Config) {
				c.Quota.Rules = append(c.Quota.Rules, config.QuotaRule{Name: "gina-requests", Who: config.Who{Users: []string{"gina"}}, Requests: quota})
				c.SetDefaults()
			}, "gina")
			// One client per instance: one connection each, within the
			// per-user connection limit.
			clients := map[*clusterNode]*http.Client{nodes[0]: nodes[0].client("gina"), nodes[1]: nodes[1].client("gina")}
			get := func(n *clusterNode) int {
				t.Helper()
				resp, err := clients[n].Get(origin.URL("/"))
				if err != nil {
					t.Fatalf("gina's request through %s: %v", n.cfg.Cluster.Instance, err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode
			}
			for i := range usedBefore {
				if code := get(nodes[i%2]); code != 200 {
					t.Fatalf("gina's request %d: %d", i, code)
				}
			}
			waitFor(t, "both instances to read gina's 2 requests back", func() bool {
				for _, n := range nodes {
					if q := n.s.Quota("gina"); len(q) != 1 || q[0].RequestsUsed != usedBefore {
						return false
					}
				}
				return proxytest.Metric(t, nodes[0].m, "rustle_cluster_redis_up") == 1
			})

			tt.outage(redis)
			a := nodes[0]
			waitFor(t, "a to see Redis down", func() bool {
				return proxytest.Metric(t, a.m, "rustle_cluster_redis_up") == 0
			})
			// Requests over several sync intervals, and so over several
			// syncs that fail (at once, or after their timeout).
			ok, total := 0, 0
			for start := time.Now(); total < 50 || time.Since(start) < 10*clusterSync; total++ {
				switch code := get(a); code {
				case 200:
					ok++
				case http.StatusTooManyRequests:
				default:
					t.Fatalf("gina's request %d during the outage: %d", total, code)
				}
			}
			t.Logf("Redis %s: %d of gina's %d requests through a succeeded", tt.name, ok, total)
			if ok > quota-usedBefore {
				t.Errorf("Redis %s: %d of %d requests succeeded on one instance, want at most %d (the quota of %d from the last total of %d)",
					tt.name, ok, total, quota-usedBefore, quota, usedBefore)
			}
			if q := a.s.Quota("gina"); len(q) != 1 || q[0].RequestsUsed != usedBefore+int64(ok) {
				t.Errorf("a's count of gina's requests: %+v, want %d used (%d before the outage, %d answered since)", q, usedBefore+ok, usedBefore, ok)
			}
		})
	}
}

// TestClusterFirstUse checks the documented bound of a user's first
// request on an instance (docs/operations.md, "Running several
// instances"): it is checked against the totals in Redis, not against
// zero. hana has used 4 of her 6 requests through a; b, which syncs only
// at its start (its interval is an hour), then gets a burst of 12 of
// her requests: 2 go through, as many as a would let through.
func TestClusterFirstUse(t *testing.T) {
	const quota, usedBefore, burst = 6, 4, 12
	redis := proxytest.StartRedis(t)
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	nodes := startCluster(t, oneRedis(redis.URL()), func(c *config.Config) {
		c.Quota.Rules = append(c.Quota.Rules, config.QuotaRule{Name: "hana-requests", Who: config.Who{Users: []string{"hana"}}, Requests: quota})
		if c.Cluster.Instance == "b" {
			c.Cluster.SyncInterval.Duration = time.Hour
		}
		c.SetDefaults()
	}, "hana")
	a, b := nodes[0], nodes[1]
	get := func(n *clusterNode, cl *http.Client) int {
		t.Helper()
		resp, err := cl.Get(origin.URL("/"))
		if err != nil {
			t.Fatalf("hana's request through %s: %v", n.cfg.Cluster.Instance, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	ca := a.client("hana")
	for i := range usedBefore {
		if code := get(a, ca); code != 200 {
			t.Fatalf("hana's request %d through a: %d", i, code)
		}
	}
	waitFor(t, "Redis to hold hana's 4 requests", func() bool {
		keys, _ := redis.Do("KEYS", "rustle:quota:hana-requests:*").([]any)
		if len(keys) != 1 {
			return false
		}
		v, err := proxytest.RedisDo(redis.Addr, "HGET", keys[0], "requests")
		return err == nil && v == "4"
	})

	cb := b.client("hana")
	ok := 0
	for i := range burst {
		switch code := get(b, cb); code {
		case 200:
			ok++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("hana's request %d through b: %d", i, code)
		}
	}
	t.Logf("%d of a burst of %d of hana's requests through b succeeded", ok, burst)
	if ok != quota-usedBefore {
		t.Errorf("%d of a burst of %d requests through b, the first since its start, succeeded; want %d (a quota of %d, %d used through a)",
			ok, burst, quota-usedBefore, quota, usedBefore)
	}
	if q := b.s.Quota("hana"); len(q) != 1 || q[0].RequestsUsed != quota {
		t.Errorf("b's count of hana's requests: %+v, want %d used", q, quota)
	}
}

// TestClusterPasswordFile checks cluster.password_file against a Redis
// that asks for a password: the right one syncs, a wrong one is
// reported unreachable, and the password is in no log line.
func TestClusterPasswordFile(t *testing.T) {
	const password = "s3cret-redis-pw"
	redis := proxytest.StartRedisWith(t, "--requirepass", password)
	for _, tt := range []struct {
		name, file string
		up         float64
	}{
		{"right", password + "\n", 1},
		{"wrong", "not-" + password + "\n", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "redis.pw")
			if err := os.WriteFile(file, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			nodes := startCluster(t, config.Cluster{Redis: redis.URL(), PasswordFile: file}, nil, "alice")
			for _, n := range nodes {
				waitFor(t, "the instance's first sync", func() bool {
					return proxytest.Metric(t, n.m, "rustle_cluster_redis_up") == tt.up
				})
				if log := n.log.String(); strings.Contains(log, password) {
					t.Errorf("instance %s logged the password:\n%s", n.cfg.Cluster.Instance, log)
				}
			}
			if tt.up == 0 && !strings.Contains(nodes[0].log.String(), "Redis unreachable") {
				t.Errorf("a wrong password not logged as Redis unreachable:\n%s", nodes[0].log.String())
			}
		})
	}
}
