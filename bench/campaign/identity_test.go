//go:build linux

package main

import (
	"context"
	"encoding/base64"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/authz"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// TestRustleProviderConf checks that the rustle-ldap and rustle-jwt
// columns' configurations validate, and that their listener tries their
// provider alone (not the htpasswd user, which would measure htpasswd).
func TestRustleProviderConf(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("0123456789abcdef"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ provider, name string }{{"", "local"}, {"ldap", "directory"}, {"jwt", "tokens"}} {
		t.Run(tt.provider, func(t *testing.T) {
			e := &env{benchDir: "..", user: "bench", pass: "0123456789abcdef", bcryptHash: string(hash),
				ldapURL: "ldap://127.0.0.1:389", jwksURL: "http://127.0.0.1:1/jwks"}
			dir := t.TempDir()
			if _, _, err := rustleCommand(tt.provider)(e, dir, lnHTTP, 3128, 1); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(filepath.Join(dir, "rustle.toml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := c.ListenerProviders(c.Listen[0]); len(got) != 1 || got[0] != tt.name {
				t.Errorf("the listener's providers: %q, want [%q]", got, tt.name)
			}
		})
	}
}

// TestIdentityColumnsPrepare runs the prepare functions of the rustle-ldap
// and rustle-jwt columns (not the campaign): the directory they start
// takes the campaign's user with the bench configuration's search, and
// the token they mint verifies against the key set they serve.
func TestIdentityColumnsPrepare(t *testing.T) {
	slapd := proxytest.RequireTool(t, "slapd", "slapd")
	proxytest.RequireTool(t, "taskset", "util-linux")
	e := &env{root: "../..", benchDir: "..", tmp: t.TempDir(), out: io.Discard, rustleBin: "/nonexistent/rustle",
		user: "bench", pass: "0123456789abcdef", lookPath: map[string]string{"slapd": slapd}}
	t.Cleanup(stopAll)
	ctx := context.Background()
	if _, err := prepareRustleLDAP(ctx, e); err != nil {
		t.Fatalf("prepareRustleLDAP: %v", err)
	}
	lp, err := auth.NewLDAP(auth.LDAPConfig{URL: e.ldapURL, InsecurePlaintext: true, BindDN: "cn=svc,dc=bench,dc=example",
		BindPassword: e.pass, BaseDN: "dc=bench,dc=example", UserFilter: "(&(objectClass=inetOrgPerson)(uid={user}))"})
	if err != nil {
		t.Fatal(err)
	}
	if v := lp.VerifyPassword([]byte(e.user), []byte(e.pass)); v.Outcome != auth.Accepted {
		t.Errorf("the campaign's user against its directory: %v", v.Outcome)
	}
	if v := lp.VerifyPassword([]byte(e.user), []byte("wrong")); v.Outcome != auth.Refused {
		t.Errorf("a wrong password against the directory: %v", v.Outcome)
	}

	if _, err := prepareRustleJWT(ctx, e); err != nil {
		t.Fatalf("prepareRustleJWT: %v", err)
	}
	jp, err := auth.NewJWT(auth.JWTConfig{Issuer: benchIssuer, Audience: "rustle-bench", JWKSURL: e.jwksURL, InsecurePlaintext: true})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Providers: []auth.Provider{jp}})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"Bearer " + e.token, "Basic " + base64.StdEncoding.EncodeToString([]byte(e.user+":"+e.token))} {
		if r := a.Authenticate([]byte(v)); r.Outcome != auth.Accepted || r.User != e.user {
			t.Errorf("the campaign's token: %v %q", r.Outcome, r.User)
		}
	}
	if _, err := os.Stat(filepath.Join(e.tmp, "slapd", "slapd.conf")); err != nil {
		t.Error(err)
	}
}

// TestRustleLimitsConf checks that the rustle-limits and rustle-redis
// columns' configurations validate with their per-user connection limit
// and quota, and that only rustle-redis counts through Redis.
func TestRustleLimitsConf(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("0123456789abcdef"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	for _, provider := range []string{"limits", "redis"} {
		t.Run(provider, func(t *testing.T) {
			e := &env{benchDir: "..", user: "bench", pass: "0123456789abcdef", bcryptHash: string(hash),
				redisURL: "redis://127.0.0.1:6379/0"}
			dir := t.TempDir()
			if _, _, err := rustleCommand(provider)(e, dir, lnHTTP, 3128, 1); err != nil {
				t.Fatal(err)
			}
			c, err := config.Load(filepath.Join(dir, "rustle.toml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if c.Limits.MaxConnectionsPerUser != 100000 || len(c.Quota.Rules) != 1 {
				t.Errorf("max_connections_per_user %d, %d quota rules; want 100000 and 1", c.Limits.MaxConnectionsPerUser, len(c.Quota.Rules))
			}
			if got, want := c.Cluster.Redis, map[string]string{"limits": "", "redis": e.redisURL}[provider]; got != want {
				t.Errorf("[cluster] redis = %q, want %q", got, want)
			}
		})
	}
}

// TestRustleAuthzColumn checks the rustle-authz column: its
// configuration validates with [authz] at the campaign's decision
// service, and that service allows the campaign's user and no other.
func TestRustleAuthzColumn(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("0123456789abcdef"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{root: "../..", benchDir: "..", tmp: t.TempDir(), out: io.Discard, rustleBin: "/nonexistent/rustle",
		user: "bench", pass: "0123456789abcdef", bcryptHash: string(hash)}
	if _, err := prepareRustleAuthz(context.Background(), e); err != nil {
		t.Fatalf("prepareRustleAuthz: %v", err)
	}
	dir := t.TempDir()
	if _, _, err := rustleCommand("authz")(e, dir, lnHTTP, 3128, 1); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(filepath.Join(dir, "rustle.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if c.Authz.URL != e.authzURL || c.Authz.CacheTTL.Duration != time.Hour {
		t.Errorf("[authz] = %+v, want the campaign's service with cache_ttl 1h", c.Authz)
	}
	client, err := authz.New(authz.Config{URL: e.authzURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(client.Close)
	for user, want := range map[string]bool{e.user: true, "mallory": false} {
		if d, _ := client.Decide(context.Background(), &authz.Input{User: user, Host: "127.0.0.1", Port: 80}, nil); d.Err != nil || d.Allow != want {
			t.Errorf("the campaign's service on %s = %+v, want allow %v", user, d, want)
		}
	}
}
