package admin_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/admin"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/server"
)

// The running proxy serves the endpoints /quota and /revoke.
var _ admin.Proxy = (*server.Server)(nil)

// TestProxyEndpoints checks /quota and /revoke as HandleProxy adds them,
// from a real server built from a configuration with a quota: a user's
// quotas, every counter, a user no quota applies to, and the revocation's
// answers (400 without a user, the count otherwise).
func TestProxyEndpoints(t *testing.T) {
	cfg := config.Default()
	cfg.Workers = 1
	cfg.Auth.Users = []config.User{{Name: "alice", Password: "pw"}, {Name: "bob", Password: "pw"}}
	cfg.Quota.Rules = []config.QuotaRule{{Name: "daily", Who: config.Who{Users: []string{"alice"}}, Requests: 3}}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	a := admin.New("127.0.0.1:0", nil, nil, nil, admin.Access{})
	a.HandleProxy(srv)
	ts := httptest.NewServer(a.Handler())
	t.Cleanup(ts.Close)

	t.Run("quota", func(t *testing.T) {
		for _, tt := range []struct {
			query, user string
			rules       []string
		}{
			{"?user=alice", "alice", []string{"daily"}},
			{"?user=bob", "bob", nil},
			{"", "", nil}, // no request counted yet: no counter
		} {
			resp, err := ts.Client().Get(ts.URL + "/quota" + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			code, body := resp.StatusCode, string(b)
			if code != 200 {
				t.Fatalf("GET /quota%s: %d %s", tt.query, code, body)
			}
			var rep admin.QuotaReport
			if err := json.Unmarshal([]byte(body), &rep); err != nil {
				t.Fatalf("GET /quota%s: %v in %s", tt.query, err, body)
			}
			var rules []string
			for _, q := range rep.Quotas {
				rules = append(rules, q.Rule)
			}
			if rep.User != tt.user || strings.Join(rules, ",") != strings.Join(tt.rules, ",") || rep.Cluster || rep.RedisUp {
				t.Errorf("GET /quota%s = %+v, want user %q, rules %v, no cluster", tt.query, rep, tt.user, tt.rules)
			}
			if !strings.Contains(body, `"quotas":[`) {
				t.Errorf("GET /quota%s: quotas not a list: %s", tt.query, body)
			}
		}
	})
	t.Run("revoke", func(t *testing.T) {
		for _, tt := range []struct {
			query string
			code  int
			body  string
		}{
			{"", http.StatusBadRequest, "user=NAME is required"},
			{"?user=bob", http.StatusOK, "revoked 0\n"},
		} {
			req, err := http.NewRequest("POST", ts.URL+"/revoke"+tt.query, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.code || !strings.Contains(string(b), tt.body) {
				t.Errorf("POST /revoke%s: %d %q, want %d with %q", tt.query, resp.StatusCode, b, tt.code, tt.body)
			}
		}
	})
}
