package server

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/metrics"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// authzPolicy is the Rego policy TestAuthzOPA's Open Policy Agent runs:
// alice may reach anything, bob nothing.
const authzPolicy = `package rustle.authz

default allow := false

allow if input.user == "alice"

ttl := 60

headers := {"X-Authz-Team": "red"} if input.user == "alice"
`

// TestAuthzOPA runs rustle with [authz] against a real Open Policy Agent
// server: a request of a user the policy allows is served, one it
// denies is answered 403 with the reason authz-denied, and the decision
// is cached (one call for two requests); a private destination the
// policy allows is still refused by the private-destination guard; a
// service that is down refuses requests 503 (authz-unavailable) under
// on_error = "deny" and lets them through under "allow", which a reload
// applies.
func TestAuthzOPA(t *testing.T) {
	opa := proxytest.StartOPA(t, authzPolicy)
	target := fmt.Sprintf("http://127.0.0.1:%d/ok", mixedOrigin(t))
	withAuthz := func(url, onError string, allowPrivate bool) *config.Config {
		return reloadConfig(t, func(c *config.Config) {
			c.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw"}}
			c.Authz = config.Authz{URL: url, InsecurePlaintext: true, OnError: onError, Timeout: config.Duration{Duration: 5 * time.Second}}
			if !allowPrivate {
				c.AllowPrivate = nil
			}
		})
	}
	m := metrics.New(metrics.Config{})
	var access logBuffer
	s, addrs := startLogged(t, withAuthz(opa.URL+"/v1/data/rustle/authz", "", true), nil, &access, WithMetrics(m))
	addr := addrs["main"]
	if got := status(t, addr, target, basic("alice", "pw")); got != 200 {
		t.Fatalf("alice: %d, want 200", got)
	}
	if got := status(t, addr, target, basic("alice", "pw")); got != 200 {
		t.Fatalf("alice again: %d, want 200", got)
	}
	if got := status(t, addr, target, basic("bob", "pw")); got != 403 {
		t.Fatalf("bob: %d, want 403", got)
	}
	proxytest.WaitFor(t, "bob's record", func() bool {
		return strings.Contains(access.String(), `"user":"bob"`) && strings.Contains(access.String(), `"reason":"authz-denied"`)
	})
	if calls, hits := proxytest.Metric(t, m, "rustle_authz_calls_total"), proxytest.Metric(t, m, "rustle_authz_cache_lookups_total", "result", "hit"); calls != 2 || hits != 1 {
		t.Errorf("rustle_authz_calls_total = %v, cache hits = %v; want 2 calls (alice, bob) and 1 hit", calls, hits)
	}
	if n := proxytest.Metric(t, m, "rustle_authz_decisions_total", "result", "deny"); n != 1 {
		t.Errorf("rustle_authz_decisions_total{result=deny} = %v, want 1", n)
	}

	t.Run("headers", func(t *testing.T) {
		// The fields an allowing answer asks for reach the origin
		// (set as a header rule's are: the client's field of that name
		// is replaced), and never the access log.
		o := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
		c := proxytest.Dial(t, addr)
		r, _ := c.RoundTrip("GET " + o.URL("/h") + " HTTP/1.1\r\nHost: " + o.Addr + "\r\nX-Authz-Team: blue\r\n" + basic("alice", "pw") + "\r\n\r\n")
		if r.Status != 200 {
			t.Fatalf("alice: %d", r.Status)
		}
		reqs := o.Requests()
		if got := reqs[len(reqs)-1].Header.Values("X-Authz-Team"); len(got) != 1 || got[0] != "red" {
			t.Errorf("the origin got X-Authz-Team %q, want the service's [red] only", got)
		}
		if strings.Contains(access.String(), "red") {
			t.Errorf("the access log holds the service's header value")
		}
	})

	t.Run("private destination", func(t *testing.T) {
		if err := s.Reload(withAuthz(opa.URL+"/v1/data/rustle/authz", "", false)); err != nil {
			t.Fatal(err)
		}
		if got := status(t, addr, target, basic("alice", "pw")); got != 403 {
			t.Fatalf("alice to a private destination the service allows: %d, want 403", got)
		}
		proxytest.WaitFor(t, "the guard's record", func() bool { return strings.Contains(access.String(), `"reason":"forbidden"`) })
	})

	t.Run("service down", func(t *testing.T) {
		down := proxytest.StartDecisionService(t, func(map[string]any) proxytest.DecisionAnswer { return proxytest.DecisionAnswer{} })
		down.Close()
		if err := s.Reload(withAuthz(down.URL, "deny", true)); err != nil {
			t.Fatal(err)
		}
		if got := status(t, addr, target, basic("alice", "pw")); got != 503 {
			t.Fatalf("on_error deny: %d, want 503", got)
		}
		proxytest.WaitFor(t, "the record", func() bool { return strings.Contains(access.String(), `"reason":"authz-unavailable"`) })
		if n := proxytest.Metric(t, m, "rustle_authz_errors_total", "error", "unreachable"); n != 1 {
			t.Errorf("rustle_authz_errors_total{error=unreachable} = %v, want 1", n)
		}
		if err := s.Reload(withAuthz(down.URL, "allow", true)); err != nil {
			t.Fatal(err)
		}
		if got := status(t, addr, target, basic("alice", "pw")); got != 200 {
			t.Fatalf("on_error allow: %d, want 200", got)
		}
	})
}
