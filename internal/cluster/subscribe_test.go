package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/quota"
)

// TestRevocationRightAfterStart checks that an instance receives a
// revocation published as soon as its Start has returned: Start waits
// for Redis to confirm the subscription (a message published before it
// is active is lost for good).
func TestRevocationRightAfterStart(t *testing.T) {
	redis := proxytest.StartRedis(t)
	start := func(name string, revoke func([]string)) *Cluster {
		t.Helper()
		c, err := New(Config{URL: redis.URL(), Instance: name, SyncInterval: time.Hour, Timeout: 5 * time.Second,
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
