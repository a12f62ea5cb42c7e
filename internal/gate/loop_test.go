package gate_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
	"github.com/rustle-proxy/rustle/internal/route"
)

// TestAuthorizeLoop checks that a request whose Via names the policy's
// instance is refused before its credentials are asked for: Loop, 508,
// logged with the reason loop and a warning; one whose Via names another
// rustle is not.
func TestAuthorizeLoop(t *testing.T) {
	gate.ResetLoopWarn()
	var logs bytes.Buffer
	cfg := proxytest.PolicyConfig{
		Users:  map[string]string{"alice": "pw"},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	}
	o := observe(t, &cfg)
	p := proxytest.NewPolicy(t, cfg)
	p.Instance = route.NewInstance()
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40020"), nil, nil)
	defer s.Close()
	tests := []struct {
		name string
		via  string
		auth []byte
		want gate.Kind
	}{
		{"own element, no credentials", p.Instance.ViaElement(1), nil, gate.Loop},
		{"own element behind others", "1.0 fred, 1.1 squid (squid/5.7), " + p.Instance.ViaElement(2), basicAuth("alice", "pw"), gate.Loop},
		{"another rustle", route.NewInstance().ViaElement(1), basicAuth("alice", "pw"), gate.OK},
		{"the process's default", (*route.Instance)(nil).ViaElement(1), basicAuth("alice", "pw"), gate.OK},
		{"none", "", basicAuth("alice", "pw"), gate.OK},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := connectReq("www.example.com", tt.auth)
			if tt.via != "" {
				r.Via = []byte(tt.via)
			}
			var g gate.Grant
			k := s.Authorize(r, &g)
			g.Answer(k.Status(), 0)
			g.Finish(0, 0)
			if k != tt.want {
				t.Fatalf("Authorize = %v, want %v", k, tt.want)
			}
			rec := o.records(t, i+1)[i]
			if tt.want == gate.Loop {
				if k.Status() != 508 || rec["reason"] != "loop" || rec["status"] != 508.0 {
					t.Errorf("status %d, record %v", k.Status(), rec)
				}
				if !strings.Contains(k.Reason(), "loop detected") {
					t.Errorf("reason %q", k.Reason())
				}
			} else if rec["reason"] != nil {
				t.Errorf("record %v", rec)
			}
		})
	}
	if got := logs.String(); strings.Count(got, "loop detected") != 1 || !strings.Contains(got, "detected_by=via") || strings.Contains(got, "pw") {
		t.Errorf("log: %s", got)
	}
}
