package server

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// quotaTunnelBytes is the byte quota of the conformance rig's q-NAME
// users.
const quotaTunnelBytes = 1 << 20

// TestQuotaEndsTunnel checks, on every front-end, that a tunnel that
// crosses its user's byte quota is ended within the documented overshoot
// (a splice pipe each way for the engine, a buffer for the goroutine
// relays and HTTP/2), logged with the reason quota, and that the user's
// next tunnel is refused (429, SOCKS5 "not allowed").
func TestQuotaEndsTunnel(t *testing.T) {
	env := newConformEnv(t)
	rig := startConformRig(t, env, false)
	payload := bytes.Repeat([]byte("quota tunnel bytes\n"), 8<<20/19) // 8 MiB each way, 16 in all
	const overshoot = 2<<20 + 128<<10                                 // a 1 MiB pipe each way, and a buffer
	for _, fe := range conformFrontEnds {
		t.Run(fe.name, func(t *testing.T) {
			if fe.socks4 {
				t.Skip(noSOCKS4User)
			}
			c := &conformCell{env: env, rig: rig, fe: fe, from: env.from()}
			user := "q-" + fe.name
			mark := rig.logLen()
			ans, err := c.try(fe, c.from, conformAsk{target: env.echo.Addr, user: user, pass: "pw", payload: payload})
			if err == nil {
				t.Fatalf("the %d bytes each way went through a quota of %d", len(payload), quotaTunnelBytes)
			}
			rec := rig.record(t, ans.client, mark)
			moved := rec.BytesUp + rec.BytesDown
			if rec.Reason != "quota" || rec.User != user {
				t.Errorf("record %+v, want %s's tunnel ended with the reason quota", rec, user)
			}
			if moved < quotaTunnelBytes || moved > quotaTunnelBytes+overshoot {
				t.Errorf("the tunnel moved %d bytes; want within %d past the quota of %d", moved, overshoot, quotaTunnelBytes)
			}
			refused := 429
			if fe.socks {
				refused = 0x02 // connection not allowed by ruleset
			}
			if a := c.do(t, conformAsk{target: env.echo.Addr, user: user, pass: "pw"}); a.code != refused {
				t.Errorf("the next tunnel of %s: answered %d, want %d", user, a.code, refused)
			}
			st := rig.s.Quota(user)
			if len(st) != 1 || st[0].BytesUsed != moved {
				t.Errorf("quota status %+v, want %d bytes used", st, moved)
			}
		})
	}
}

// TestQuotaStateFile checks that without a cluster the quota counters
// survive a restart through quota.state_file: a monthly quota spent
// before the restart is still spent after it.
func TestQuotaStateFile(t *testing.T) {
	origin := proxytest.NewOrigin(t, proxytest.Respond(200, "ok"))
	state := filepath.Join(t.TempDir(), "quota.json")
	cfg := config.Default()
	cfg.Workers = 1
	cfg.AllowPrivate = []string{"127.0.0.1/32"}
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}}
	cfg.Quota.StateFile = state
	cfg.Quota.Rules = []config.QuotaRule{{Name: "monthly", Period: "month", TimeZone: "Europe/Paris", Requests: 2}}
	cfg.Listen = []config.Listener{{Name: "plain", Address: "127.0.0.1:0"}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	auth := "Proxy-Authorization: " + basicValue("alice", "pw")
	run := func(wants ...string) {
		t.Helper()
		s, err := New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Start(); err != nil {
			s.Close()
			t.Fatal(err)
		}
		addr := s.Addrs()[0].Addr.String()
		for i, want := range wants {
			status, _, err := rawGet(t, addr, "", origin.URL("/"), auth)
			if err != nil || !strings.HasPrefix(status, want) {
				t.Errorf("request %d: %q, %v; want %s", i, status, err, want)
			}
		}
		s.Close() // saves the counters
	}
	run("200", "200", "429")
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("no state file after the shutdown: %v", err)
	}
	run("429") // the restart kept the month's two requests
}

// TestQuotaEndsDownload checks that a forwarded response that crosses
// its user's byte quota is cut within the documented overshoot (a
// metered splice segment, 1 MiB, on HTTP/1.1; a DATA chunk on HTTP/2),
// logged with the reason quota.
func TestQuotaEndsDownload(t *testing.T) {
	env := newConformEnv(t)
	env.origin.Handle("/bulk", proxytest.Bulk(8<<20, proxytest.ByLength))
	rig := startConformRig(t, env, false)
	const overshoot = 1<<20 + 64<<10
	for _, fe := range conformFrontEnds {
		t.Run(fe.name, func(t *testing.T) {
			if fe.socks {
				t.Skip("SOCKS forwards no requests")
			}
			c := &conformCell{env: env, rig: rig, fe: fe, from: env.from()}
			user := "q-" + fe.name
			mark := rig.logLen()
			ans, err := c.try(fe, c.from, conformAsk{forward: true, target: env.origin.URL("/bulk"), user: user, pass: "pw"})
			if err == nil && len(ans.body) >= 8<<20 {
				t.Fatalf("the 8 MiB response went through a quota of %d", quotaTunnelBytes)
			}
			rec := rig.record(t, ans.client, mark)
			if rec.Reason != "quota" || rec.User != user || rec.Status != 200 {
				t.Errorf("record %+v, want %s's response cut with the reason quota", rec, user)
			}
			if rec.BytesDown < quotaTunnelBytes || rec.BytesDown > quotaTunnelBytes+overshoot {
				t.Errorf("%d bytes down; want within %d past the quota of %d", rec.BytesDown, overshoot, quotaTunnelBytes)
			}
			if st := rig.s.Quota(user); len(st) != 1 || st[0].BytesUsed != rec.BytesDown {
				t.Errorf("quota status %+v, want %d bytes used", st, rec.BytesDown)
			}
		})
	}
}
