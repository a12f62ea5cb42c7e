package gate_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/sni"
)

// decisionByUser is a decision service allowing alice, with a header,
// and denying everyone else.
func decisionByUser(in map[string]any) proxytest.DecisionAnswer {
	if in["user"] == "alice" {
		return proxytest.DecisionAnswer{Body: `{"result":{"allow":true,"headers":{"X-Tenant":"team-a"}}}`}
	}
	return proxytest.DecisionAnswer{Body: `{"result":{"allow":false}}`}
}

// newAuthz returns a decision service client of url.
func newAuthz(t *testing.T, url string, onError authz.OnError) *authz.Client {
	t.Helper()
	c, err := authz.New(authz.Config{URL: url, Timeout: 2 * time.Second, OnError: onError,
		CheckHeader: func(string, string) error { return nil }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// closedListener returns a loopback address that accepts connections and
// closes them: a destination a dial reaches.
func closedListener(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestAuthz checks the decision service on the request path: it is asked
// about a request the rules allow, with the document's fields, and its
// denial is a 403 logged authz-denied with the rule that allowed it; a
// request the rules deny is not asked about; a service that cannot
// decide refuses the request 503 (authz-unavailable) under on_error
// deny, lets it through under allow; and a service that allows a
// private destination does not get it past the private-destination
// guard.
func TestAuthz(t *testing.T) {
	addr := closedListener(t)
	svc := proxytest.StartDecisionService(t, decisionByUser)
	down := proxytest.StartDecisionService(t, decisionByUser)
	down.Close()
	rules := []acl.Rule{{Name: "no-blocked", Action: acl.Deny, Hosts: []string{"blocked.example"}}}
	for _, tt := range []struct {
		name    string
		url     string
		onError authz.OnError
		guard   bool
		user    string
		host    string
		want    gate.Kind
		reason  string
		asked   bool
		headers []authz.Header
	}{
		{name: "allowed", url: svc.URL, user: "alice", want: gate.OK, asked: true,
			headers: []authz.Header{{Name: "X-Tenant", Value: "team-a"}}},
		{name: "denied", url: svc.URL, user: "bob", want: gate.Denied, reason: "authz-denied", asked: true},
		{name: "denied by a rule first", url: svc.URL, user: "alice", host: "blocked.example", want: gate.Denied, reason: "denied"},
		{name: "down, on_error deny", url: down.URL, user: "alice", want: gate.AuthzUnavailable, reason: "authz-unavailable"},
		{name: "down, on_error allow", url: down.URL, onError: authz.Allow, user: "alice", want: gate.OK},
		{name: "allowed private destination", url: svc.URL, guard: true, user: "alice", want: gate.Forbidden,
			reason: "forbidden", asked: true, headers: []authz.Header{{Name: "X-Tenant", Value: "team-a"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			cfg := proxytest.PolicyConfig{Users: users, Rules: rules, Default: acl.Allow, Guard: tt.guard,
				Authz:  newAuthz(t, tt.url, tt.onError),
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}
			o := observe(t, &cfg)
			p := proxytest.NewPolicy(t, cfg)
			s := newSession(t, p)
			calls := svc.Calls()
			r := connectTo(t, addr, basicAuth(tt.user, users[tt.user]))
			if tt.host != "" {
				r = connectReq(tt.host, basicAuth(tt.user, users[tt.user]))
			}
			var g gate.Grant
			kind := s.Authorize(r, &g)
			if kind == gate.OK {
				if !reflect.DeepEqual(g.AuthzHeaders(), tt.headers) {
					t.Errorf("AuthzHeaders = %v, want %v", g.AuthzHeaders(), tt.headers)
				}
				c, err := g.Dial(context.Background())
				if err == nil {
					c.Close()
				} else {
					kind = gate.DialKind(err)
				}
			}
			if kind != tt.want {
				t.Fatalf("Authorize and Dial = %v, want %v", kind, tt.want)
			}
			if asked := svc.Calls() > calls; asked != tt.asked {
				t.Errorf("the service was asked: %v, want %v", asked, tt.asked)
			}
			g.Answer(kind.Status(), 0)
			g.Finish(0, 0)
			rec := o.records(t, 1)[0]
			if got, _ := rec["reason"].(string); got != tt.reason {
				t.Errorf("record reason %q, want %q", got, tt.reason)
			}
			if tt.reason == "authz-denied" && rec["rule"] != acl.DefaultRule {
				t.Errorf("record rule %q, want the rule that allowed it (%s)", rec["rule"], acl.DefaultRule)
			}
			if tt.reason != "" && !strings.Contains(logs.String(), "reason="+tt.reason) {
				t.Errorf("debug log %q has no line for the refusal", logs.String())
			}
			if tt.want == gate.AuthzUnavailable && kind.Status() != 503 {
				t.Errorf("AuthzUnavailable's status = %d, want 503", kind.Status())
			}
		})
	}
	in := svc.Inputs()[0]
	want := map[string]any{"listener": "test", "user": "alice", "groups": []any{}, "client": "127.0.0.1",
		"host": "127.0.0.1", "port": in["port"], "method": "CONNECT", "protocol": "connect", "sni": ""}
	if !reflect.DeepEqual(in, want) {
		t.Errorf("the service's input = %v, want %v", in, want)
	}
}

// TestAuthzSNI checks that a tunnel that reads its ClientHello is asked
// about once the hello is read, with its server name, not before its
// answer; and that a SOCKS5 UDP association is asked about without a
// destination.
func TestAuthzSNI(t *testing.T) {
	svc := proxytest.StartDecisionService(t, func(in map[string]any) proxytest.DecisionAnswer {
		if in["protocol"] == "socks5-udp" || in["sni"] == "ok.example" {
			return proxytest.DecisionAnswer{Body: `{"result":true}`}
		}
		return proxytest.DecisionAnswer{Body: `{"result":false}`}
	})
	for _, tt := range []struct {
		name string
		sni  string
		want gate.Kind
	}{
		{"allowed name", "ok.example", gate.OK},
		{"denied name", "blocked.example", gate.Denied},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := proxytest.PolicyConfig{SNI: sni.Log, Authz: newAuthz(t, svc.URL, authz.Deny)}
			o := observe(t, &cfg)
			s := newSession(t, proxytest.NewPolicy(t, cfg))
			n := svc.Calls()
			var g gate.Grant
			if k := s.Authorize(connectReq("ok.example", nil), &g); k != gate.OK || !g.NeedsHello() {
				t.Fatalf("Authorize = %v, NeedsHello %v; want OK, true", k, g.NeedsHello())
			}
			if svc.Calls() != n {
				t.Fatal("the service was asked before the hello was read")
			}
			if k := g.CheckHello(sni.Hello{ServerName: tt.sni}, nil); k != tt.want {
				t.Fatalf("CheckHello = %v, want %v", k, tt.want)
			}
			ins := svc.Inputs()
			if got := ins[len(ins)-1]; got["sni"] != tt.sni || got["host"] != "ok.example" {
				t.Errorf("the service's input = %v, want sni %q", got, tt.sni)
			}
			g.Answer(200, 0)
			g.Finish(0, 0)
			rec := o.records(t, 1)[0]
			if got, _ := rec["reason"].(string); got != map[bool]string{true: "authz-denied"}[tt.want == gate.Denied] || rec["sni"] != tt.sni {
				t.Errorf("record reason %q sni %q", got, rec["sni"])
			}
		})
	}
	t.Run("association", func(t *testing.T) {
		s := newSession(t, proxytest.NewPolicy(t, proxytest.PolicyConfig{Authz: newAuthz(t, svc.URL, authz.Deny)}))
		var g gate.Grant
		if k := s.AuthorizeAssociation(associateReq(), &g); k != gate.OK {
			t.Fatalf("AuthorizeAssociation = %v", k)
		}
		ins := svc.Inputs()
		if got := ins[len(ins)-1]; got["protocol"] != "socks5-udp" || got["host"] != "" || got["port"] != 0.0 || got["method"] != "UDP ASSOCIATE" {
			t.Errorf("the service's input = %v, want an association without a destination", got)
		}
	})
}
