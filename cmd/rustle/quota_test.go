package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/server"
)

// TestQuotaCommand checks that `rustle quota USER` shows, from the admin
// listener of a running rustle, the user's use, limit, what is left and
// the reset time, and says so for a user no quota applies to.
func TestQuotaCommand(t *testing.T) {
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") }))
	t.Cleanup(origin.Close)
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Admin = "127.0.0.1:0"
	cfg.AllowPrivate = []string{"127.0.0.1/32"}
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw"}}
	cfg.Quota.Rules = []config.QuotaRule{{Name: "daily", Who: config.Who{Users: []string{"alice"}}, Requests: 3, Bytes: 1000, TimeZone: "Europe/Paris"}}
	cfg.Listen = []config.Listener{{Address: "127.0.0.1:0"}}
	o, srv := startOpsServer(t, cfg)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	proxy := &url.URL{Scheme: "http", User: url.UserPassword("alice", "pw"), Host: srv.Addrs()[0].Addr.String()}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}
	for range 2 {
		resp, err := client.Get(origin.URL)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	// A request is counted once rustle has finished it, which may be
	// after the client has read the response.
	deadline := time.Now().Add(10 * time.Second)
	for st := srv.Quota("alice"); len(st) != 1 || st[0].BytesUsed != 10; st = srv.Quota("alice") {
		if time.Now().After(deadline) {
			t.Fatalf("alice's two requests not counted: %+v", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	admin := o.admin.Addr().String()

	var out, errb strings.Builder
	if code := run([]string{"quota", "--admin", admin, "alice"}, nil, &out, &errb); code != 0 {
		t.Fatalf("rustle quota alice: exit %d: %s", code, errb.String())
	}
	for _, re := range []string{
		`daily\s+alice\s+day\s+bytes\s+10\s+1000\s+990\s+\d{4}-\d\d-\d\d 00:00 \S+`,
		`daily\s+alice\s+day\s+requests\s+2\s+3\s+1\s+`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("rustle quota alice: no line matching %q in\n%s", re, out.String())
		}
	}
	out.Reset()
	if code := run([]string{"quota", "--admin", admin, "bob"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "no quota applies to bob") {
		t.Errorf("rustle quota bob: exit %d, %q", code, out.String())
	}
	if code := run([]string{"quota", "alice"}, nil, &out, &errb); code != 2 {
		t.Errorf("rustle quota without an admin address: exit %d, want 2", code)
	}
}

// TestQuotaCommandToken checks `rustle quota` against an admin listener
// that requires a bearer token: without it the call fails saying what
// is missing; with --token-file, or the token_file of -c FILE, it is
// answered.
func TestQuotaCommandToken(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte("0123456789abcdef0123456789abcdef\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Admin = "127.0.0.1:0"
	cfg.AdminAccess.TokenFile = token
	cfg.Listen = []config.Listener{{Address: "127.0.0.1:0"}}
	o, _ := startOpsServer(t, cfg)
	admin := o.admin.Addr().String()
	cfgPath := filepath.Join(dir, "rustle.toml")
	src := "admin = \"" + admin + "\"\n[admin_access]\ntoken_file = \"admin.token\"\n[[listen]]\naddress = \"127.0.0.1:0\"\n"
	if err := os.WriteFile(cfgPath, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no token", []string{"--admin", admin, "bob"}, 1, "needs its token"},
		{"--token-file", []string{"--admin", admin, "--token-file", token, "bob"}, 0, "no quota applies to bob"},
		{"-c FILE", []string{"-c", cfgPath, "bob"}, 0, "no quota applies to bob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb strings.Builder
			code := run(append([]string{"quota"}, tc.args...), nil, &out, &errb)
			if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
				t.Errorf("exit %d, out %q, err %q; want exit %d with %q", code, out.String(), errb.String(), tc.code, tc.want)
			}
		})
	}
}

// startOpsServer validates cfg and starts its admin side and a server
// attached to it (not started), both closed at the end of the test.
func startOpsServer(t *testing.T, cfg *config.Config) (*ops, *server.Server) {
	t.Helper()
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.DiscardHandler)
	o, err := startOps(cfg, logger, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { o.close(context.Background()) })
	srv, err := server.New(cfg, logger, server.WithMetrics(o.metrics))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	o.attach(srv)
	return o, srv
}
