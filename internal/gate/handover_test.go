package gate

import (
	"context"
	"testing"
)

// TestHandOverKeepsLittle checks what an engine tunnel keeps besides
// engineTunnel itself: nothing for an authenticated tunnel that holds
// no more than its connection's admission (no access log, no quota, no
// extra upstream, no user counted for the grant), and what it must
// give back at its end otherwise. An idle tunnel through the plain port
// is the engine's state and this (TestIdlePlainTunnelMemory): a
// tunnelGive kept for nothing was 96 bytes more per tunnel.
func TestHandOverKeepsLittle(t *testing.T) {
	tests := []struct {
		name string
		set  func(g *Grant)
		// give says whether a tunnelGive is kept, extraFor what it
		// names for an extra upstream.
		give     bool
		extraFor string
		counted  string
	}{
		{"authenticated", func(g *Grant) {}, false, "", ""},
		{"no user", func(g *Grant) { g.User, g.account = "", "" }, false, "", ""},
		{"extra upstream", func(g *Grant) { g.hold = holdExtra }, true, "alice", ""},
		{"extra upstream, user counted for the grant", func(g *Grant) { g.hold, g.counted = holdExtra, "alice" }, true, "", "alice"},
		{"user counted for the grant", func(g *Grant) { g.counted = "alice" }, true, "", "alice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Policy{Listener: "front"}
			s := &Session{p: p, rctx: context.Background()}
			g := &Grant{s: s}
			g.User, g.account = "alice", "alice"
			g.status, g.class = 200, 200
			tt.set(g)
			et := g.handOver(handed{})
			if !tt.give {
				if et.more != nil {
					t.Fatalf("the tunnel keeps %+v, want nothing more", et.more)
				}
				return
			}
			if et.more == nil || et.more.give == nil {
				t.Fatal("the tunnel keeps nothing of what it gives back at its end")
			}
			gv := et.more.give
			if gv.extra != (g.hold == holdExtra) || gv.extraFor != tt.extraFor || gv.counted != tt.counted {
				t.Errorf("the tunnel gives back extra %v for %q, counted %q; want extra %v for %q, counted %q",
					gv.extra, gv.extraFor, gv.counted, g.hold == holdExtra, tt.extraFor, tt.counted)
			}
		})
	}
}
