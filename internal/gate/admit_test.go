package gate_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/limits"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestAdmit checks the admission every accept path asks: each limit's
// verdict, the HTTP status and reason a refusal is answered with (503
// for rustle's own limit, 429 for the client's), the cool-down's
// Retry-After, and that a released admission makes room again.
func TestAdmit(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	for _, tt := range []struct {
		name   string
		limits *limits.Config
		before func(l *limits.Limiter) // what happens before the second connection, from a
		second netip.Addr
		want   limits.Verdict
		status int
		reason string
		retry  bool // a Retry-After is due
	}{
		{name: "no limiter", second: a, want: limits.OK, status: 200, reason: "ok"},
		{name: "in all", limits: &limits.Config{MaxConns: 1}, second: b,
			want: limits.TooMany, status: 503, reason: "too many connections"},
		{name: "per client", limits: &limits.Config{MaxConnsPerClient: 1}, second: a,
			want: limits.TooManyFromClient, status: 429, reason: "too many connections from the client"},
		{name: "per client, another client", limits: &limits.Config{MaxConnsPerClient: 1}, second: b,
			want: limits.OK, status: 200, reason: "ok"},
		{name: "rate", limits: &limits.Config{ConnRate: 0.001, ConnBurst: 1}, second: a,
			want: limits.TooFast, status: 429, reason: "too many new connections from the client"},
		{name: "cool-down", limits: &limits.Config{AuthFailuresPerAddress: 2, AuthWindow: time.Minute, AuthCooldown: time.Hour},
			before: func(l *limits.Limiter) {
				l.AuthFailed(a, []byte("x"))
				l.AuthFailed(a, []byte("y"))
			},
			second: a, want: limits.CoolingDown, status: 429,
			reason: "client cooling down after failed authentications", retry: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Limits: tt.limits})
			if first := p.Admit(a); !first.OK() {
				t.Fatalf("first connection: %v, want admitted", first.Verdict)
			}
			if tt.before != nil {
				tt.before(p.Limiter)
			}
			got := p.Admit(tt.second)
			if got.Verdict != tt.want || got.OK() != (tt.want == limits.OK) || got.Status() != tt.status || got.Reason() != tt.reason {
				t.Fatalf("second connection: verdict %v ok %v status %d reason %q; want %v %d %q",
					got.Verdict, got.OK(), got.Status(), got.Reason(), tt.want, tt.status, tt.reason)
			}
			if tt.retry != (got.RetryAfter > 0) || got.RetryAfter > time.Hour {
				t.Fatalf("RetryAfter = %v, want one (%v) within the cool-down", got.RetryAfter, tt.retry)
			}
			if got.OK() {
				p.Release(tt.second)
			}
			p.Release(a)
			if p.Limiter != nil && p.Limiter.Conns() != 0 {
				t.Fatalf("%d connections counted after their release", p.Limiter.Conns())
			}
			if tt.want == limits.TooMany {
				if again := p.Admit(tt.second); !again.OK() {
					t.Fatalf("after the release: %v, want admitted", again.Verdict)
				}
				p.Release(tt.second)
			}
		})
	}
}
