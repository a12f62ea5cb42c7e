package gate_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestAudit checks what a rule in audit mode does on the request path: a
// CONNECT a report rule (or, with the policy in audit mode, a deny rule
// or a default of deny) would refuse is dialled and served, and its
// access log record, the rustle_acl_would_deny_total series and a debug
// line name the rule; an allowed request names none; and the
// private-destination guard still refuses a private destination that
// audit lets past the rules.
func TestAudit(t *testing.T) {
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
	addr := ln.Addr().String()
	for _, tt := range []struct {
		name      string
		cfg       proxytest.PolicyConfig
		want      gate.Kind
		rule      string
		wouldDeny string
	}{
		{name: "report rule", cfg: proxytest.PolicyConfig{Default: acl.Allow, Rules: []acl.Rule{
			{Name: "new-block", Action: acl.Report, Hosts: []string{"127.0.0.0/8"}}}},
			want: gate.OK, rule: "new-block", wouldDeny: "new-block"},
		{name: "deny rule enforced", cfg: proxytest.PolicyConfig{Default: acl.Allow, Rules: []acl.Rule{
			{Name: "block", Action: acl.Deny, Hosts: []string{"127.0.0.0/8"}}}},
			want: gate.Denied, rule: "block"},
		{name: "deny rule in audit mode", cfg: proxytest.PolicyConfig{Audit: true, Default: acl.Allow, Rules: []acl.Rule{
			{Name: "block", Action: acl.Deny, Hosts: []string{"127.0.0.0/8"}}}},
			want: gate.OK, rule: "block", wouldDeny: "block"},
		{name: "default in audit mode", cfg: proxytest.PolicyConfig{Audit: true, Rules: []acl.Rule{
			{Name: "other", Action: acl.Allow, Hosts: []string{"example.com"}}}},
			want: gate.OK, rule: acl.DefaultRule, wouldDeny: acl.DefaultRule},
		{name: "allowed", cfg: proxytest.PolicyConfig{Audit: true, Rules: []acl.Rule{
			{Name: "loopback", Action: acl.Allow, Hosts: []string{"127.0.0.1"}}}},
			want: gate.OK, rule: "loopback"},
		{name: "guard in audit mode", cfg: proxytest.PolicyConfig{Audit: true, Guard: true, Rules: []acl.Rule{
			{Name: "block", Action: acl.Deny}}},
			want: gate.Forbidden, rule: "block", wouldDeny: "block"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer
			cfg := tt.cfg
			cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
			o := observe(t, &cfg)
			p := proxytest.NewPolicy(t, cfg)
			s := newSession(t, p)
			var g gate.Grant
			kind := s.Authorize(connectTo(t, addr, nil), &g)
			if kind == gate.OK {
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
			g.Answer(kind.Status(), 0)
			g.Finish(0, 0)
			rec := o.records(t, 1)[0]
			got, _ := rec["would_deny"].(string)
			if rec["rule"] != tt.rule || got != tt.wouldDeny {
				t.Errorf("record rule %q would_deny %q, want %q %q", rec["rule"], got, tt.rule, tt.wouldDeny)
			}
			n := proxytest.Metric(t, o.m, "rustle_acl_would_deny_total", "rule", tt.wouldDeny)
			if tt.wouldDeny == "" {
				n = proxytest.Metric(t, o.m, "rustle_acl_would_deny_total")
			}
			if want := map[bool]float64{true: 1}[tt.wouldDeny != ""]; n != want {
				t.Errorf("rustle_acl_would_deny_total = %v, want %v", n, want)
			}
			line := strings.Contains(logs.String(), "audit mode") && strings.Contains(logs.String(), "would_deny="+tt.wouldDeny)
			if line != (tt.wouldDeny != "") {
				t.Errorf("debug log %q: audit line %v, want %v", logs.String(), line, tt.wouldDeny != "")
			}
		})
	}
}

// TestAuditDatagrams checks that an association's record names the rule
// in audit mode that let any of its datagrams through, not only the
// last datagram's.
func TestAuditDatagrams(t *testing.T) {
	cfg := proxytest.PolicyConfig{Default: acl.Allow, Rules: []acl.Rule{
		{Name: "no-dns-elsewhere", Action: acl.Report, Protocols: []string{"socks5-udp"}, Ports: []string{"53"}, Hosts: []string{"192.0.2.53"}},
	}}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	s := newSession(t, p)
	var g gate.Grant
	if k := s.AuthorizeAssociation(associateReq(), &g); k != gate.OK {
		t.Fatalf("AuthorizeAssociation = %v", k)
	}
	for _, dst := range []string{"198.51.100.53:53", "192.0.2.53:53", "198.51.100.53:53"} {
		if err := g.PermitDatagram("", netip.MustParseAddrPort(dst)); err != nil {
			t.Fatalf("PermitDatagram(%s) = %v", dst, err)
		}
	}
	g.Answer(0, 200)
	g.Finish(0, 0)
	rec := o.records(t, 1)[0]
	if rec["would_deny"] != "no-dns-elsewhere" || rec["rule"] != acl.DefaultRule {
		t.Errorf("record rule %q would_deny %q, want default and no-dns-elsewhere", rec["rule"], rec["would_deny"])
	}
}
