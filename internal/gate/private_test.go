package gate_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestPrivateRefusalHint checks that a destination refused as private is
// logged with the way to allow it (allow_private, --allow-private), and
// that the reason a client is answered with does not name it.
func TestPrivateRefusalHint(t *testing.T) {
	var logs bytes.Buffer
	p := proxytest.NewPolicy(t, proxytest.PolicyConfig{Guard: true})
	p.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := p.NewSession(context.Background(), netip.MustParseAddrPort("192.0.2.1:1000"), nil, nil)
	t.Cleanup(s.Close)
	var g gate.Grant
	if k := s.Authorize(connectTo(t, ln.Addr().String(), nil), &g); k != gate.OK {
		t.Fatalf("Authorize = %v", k)
	}
	_, err = g.Dial(context.Background())
	var de *dialer.Error
	if !errors.As(err, &de) || gate.DialKind(err) != gate.Forbidden {
		t.Fatalf("Dial = %v, want a refusal of the private destination", err)
	}
	if line := logs.String(); !strings.Contains(line, "destination refused") || !strings.Contains(line, "allow_private") ||
		!strings.Contains(line, "--allow-private") {
		t.Errorf("log %q does not name allow_private and --allow-private", line)
	}
	if r := de.Reason(); strings.Contains(r, "allow") {
		t.Errorf("the client's reason %q names the operator's setting", r)
	}
}
