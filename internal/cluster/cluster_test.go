package cluster

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/quota"
)

// TestUnreachable checks that with no Redis to reach, Start and Close
// return within the timeouts, nothing counted is lost (it stays pending,
// to be sent once Redis is back), the instance says it is down and logs
// it once.
func TestUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	tr := quota.New(quota.Config{Rules: []quota.Rule{{Name: "d", Users: []string{"*"}, Requests: 10}}})
	u := tr.User("alice")
	u.Begin()
	log := &proxytest.LogBuffer{}
	c, err := New(Config{URL: "redis://" + addr, SyncInterval: 20 * time.Millisecond, Timeout: 100 * time.Millisecond,
		Quota: tr, LocalConns: func(fn func(string, int)) { fn("alice", 1) }, Revoke: func([]string) {},
		Logger: slog.New(slog.NewTextHandler(log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	c.Start()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Start took %v with Redis unreachable", d)
	}
	if c.Up() {
		t.Error("Up with Redis unreachable")
	}
	u.Begin()
	deadline := time.Now().Add(10 * time.Second)
	for c.syncs.Load() < 5 { // a few failed syncs
		if time.Now().After(deadline) {
			t.Fatalf("%d syncs in 10s", c.syncs.Load())
		}
		time.Sleep(time.Millisecond)
	}
	t0 := time.Now()
	c.Close()
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Close took %v with Redis unreachable", d)
	}
	if n := strings.Count(log.String(), "Redis unreachable"); n != 1 {
		t.Errorf("logged Redis unreachable %d times, want once:\n%s", n, log.String())
	}
	st := tr.Status("alice")
	if len(st) != 1 || st[0].RequestsUsed < 2 {
		t.Errorf("requests counted while Redis was unreachable: %+v", st)
	}
	if c.Others("alice") != 0 {
		t.Errorf("Others = %d with Redis unreachable", c.Others("alice"))
	}
}

func TestNewBadURL(t *testing.T) {
	if _, err := New(Config{URL: "http://x"}); err == nil || !strings.Contains(err.Error(), "cluster: redis URL") {
		t.Errorf("New(http://x) = %v", err)
	}
}

// TestClientOf checks the three kinds of Redis a Config names, and that
// what the log shows of each carries no password.
func TestClientOf(t *testing.T) {
	for _, tt := range []struct {
		name  string
		cfg   Config
		where string // "" = an error
	}{
		{"one server", Config{URL: "redis://u:s3cret@127.0.0.1:6379/0"}, "127.0.0.1:6379"},
		{"one server, password apart", Config{URL: "redis://127.0.0.1:6379/0", Password: "s3cret"}, "127.0.0.1:6379"},
		{"sentinels", Config{Sentinels: []string{"127.0.0.1:26379", "127.0.0.1:26380"}, MasterName: "m", Password: "s3cret", SentinelPassword: "s3cret"},
			"master m of sentinels 127.0.0.1:26379,127.0.0.1:26380"},
		{"sentinels without a master", Config{Sentinels: []string{"127.0.0.1:26379"}}, ""},
		{"nodes", Config{Nodes: []string{"127.0.0.1:7000", "127.0.0.1:7001"}, Password: "s3cret"}, "cluster of nodes 127.0.0.1:7000,127.0.0.1:7001"},
		{"bad URL", Config{URL: "http://u:s3cret@x"}, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.SyncInterval, tt.cfg.Timeout = time.Second, 500*time.Millisecond
			c, err := New(tt.cfg)
			if tt.where == "" {
				if err == nil {
					c.Close()
					t.Fatal("New accepted it")
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("error shows the password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer c.client.Close()
			if c.where != tt.where {
				t.Errorf("where = %q, want %q", c.where, tt.where)
			}
		})
	}
}
