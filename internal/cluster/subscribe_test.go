package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/quota"
)

// startInstance starts an instance named name on the Redis at url that
// syncs every interval and receives revocations with revoke; t.Cleanup
// closes it.
func startInstance(t *testing.T, url, name string, interval, timeout time.Duration, revoke func([]string)) *Cluster {
	t.Helper()
	c, err := New(Config{URL: url, Instance: name, SyncInterval: interval, Timeout: timeout,
		Quota:      quota.New(quota.Config{}),
		LocalConns: func(func(string, int)) {},
		Revoke:     revoke})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	t.Cleanup(c.Close)
	return c
}

// TestRevocationRightAfterStart checks that an instance receives a
// revocation published as soon as its Start has returned: Start finds
// the stream's last entry before it returns, and the follower reads on
// from there however late its first XREAD comes.
func TestRevocationRightAfterStart(t *testing.T) {
	redis := proxytest.StartRedis(t)
	start := func(name string, revoke func([]string)) *Cluster {
		t.Helper()
		return startInstance(t, redis.URL(), name, time.Hour, 5*time.Second, revoke)
	}
	a := start("a", func([]string) {})
	for i := range 20 {
		got := make(chan []string, 1)
		// Later instances' revocations reach this one too: keep the first.
		start(fmt.Sprintf("b%d", i), func(users []string) {
			select {
			case got <- users:
			default:
			}
		})
		user := fmt.Sprintf("user%d", i)
		if err := a.Publish([]string{user}); err != nil {
			t.Fatal(err)
		}
		select {
		case users := <-got:
			if len(users) != 1 || users[0] != user {
				t.Fatalf("instance b%d received %v, want [%s]", i, users, user)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("instance b%d never received the revocation published right after its Start", i)
		}
	}
}

// TestRevocationThroughOutage checks that a revocation published while
// Redis is down is not lost: Publish says so and keeps it, the next sync
// after Redis is back sends it, and the other instance, whose follower
// was cut off meanwhile, reads it.
func TestRevocationThroughOutage(t *testing.T) {
	redis := proxytest.StartRedis(t)
	got := make(chan []string, 4)
	start := func(name string, revoke func([]string)) *Cluster {
		t.Helper()
		return startInstance(t, redis.URL(), name, 20*time.Millisecond, time.Second, revoke)
	}
	a := start("a", func([]string) {})
	start("b", func(users []string) { got <- users })
	receive := func(want string) {
		t.Helper()
		select {
		case users := <-got:
			if len(users) != 1 || users[0] != want {
				t.Fatalf("b received %v, want [%s]", users, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("b never received the revocation of %s", want)
		}
	}
	if err := a.Publish([]string{"before"}); err != nil {
		t.Fatal(err)
	}
	receive("before")

	redis.Kill()
	err := a.Publish([]string{"during"})
	if err == nil || !strings.Contains(err.Error(), "sent again") {
		t.Fatalf("Publish with Redis down = %v, want an error saying it is sent again", err)
	}
	select {
	case users := <-got:
		t.Fatalf("b received %v with Redis down", users)
	default:
	}
	redis.Start()
	receive("during")
	if err := a.Publish([]string{"after"}); err != nil {
		t.Fatal(err)
	}
	receive("after")
}
