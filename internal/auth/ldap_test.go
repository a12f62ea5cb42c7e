package auth_test

import (
	"bytes"
	"crypto/tls"
	"encoding/base64"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// ldapGroups maps the test directory's groups to rustle groups; staff
// is left unmapped.
var ldapGroups = map[string][]string{
	"devs": {"cn=developers,ou=groups,dc=example,dc=org"},
	"ops":  {"CN=Ops,OU=Groups,DC=Example,DC=Org"}, // DNs compare without regard to case
}

// activeFilter finds a user by uid unless disabled.
const activeFilter = "(&(objectClass=inetOrgPerson)(uid={user})(!(employeeType=disabled)))"

func basicValue(user, pass string) []byte {
	return []byte("Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass)))
}

// TestLDAP checks each way to reach the directory and to find users and
// groups against a real slapd: search-then-bind with a service account,
// groups from memberOf or a group search, a direct bind by DN template,
// StartTLS and ldaps://. Each accepts right passwords with the mapped
// groups and refuses wrong ones, unknown and disabled users and empty
// passwords.
func TestLDAP(t *testing.T) {
	d := proxytest.StartSlapd(t, proxytest.DirectoryLDIF)
	tlsc := &tls.Config{RootCAs: d.Roots}
	search := auth.LDAPConfig{
		URL: d.URL, InsecurePlaintext: true, BindDN: "cn=svc,dc=example,dc=org", BindPassword: "svc-pw",
		BaseDN: "ou=people,dc=example,dc=org", UserFilter: activeFilter, GroupAttribute: "memberOf", Groups: ldapGroups,
	}
	groupSearch := search
	groupSearch.GroupAttribute = ""
	groupSearch.GroupBaseDN, groupSearch.GroupFilter = "ou=groups,dc=example,dc=org", "(&(objectClass=groupOfNames)(member={dn}))"
	direct := auth.LDAPConfig{
		URL: d.URL, InsecurePlaintext: true, UserDN: "uid={user},ou=people,dc=example,dc=org",
		UserFilter: activeFilter, GroupAttribute: "memberOf", Groups: ldapGroups,
	}
	startTLS := search
	startTLS.InsecurePlaintext, startTLS.StartTLS, startTLS.TLS = false, true, tlsc
	ldaps := search
	ldaps.URL, ldaps.InsecurePlaintext, ldaps.TLS = d.TLSURL, false, tlsc
	named := search
	named.NameAttribute = "uid"
	directNamed := direct
	directNamed.NameAttribute = "uid"

	type check struct {
		user, pass string
		want       auth.Outcome
		groups     []string
	}
	checks := []check{
		{"alice", "alice-pw", auth.Accepted, []string{"devs"}},
		{"bob", "bob-pw", auth.Accepted, []string{"ops"}},
		{"alice", "wrong", auth.Refused, nil},
		{"alice", "", auth.Refused, nil},
		{"nobody", "alice-pw", auth.Refused, nil},
		{"carol", "carol-pw", auth.Refused, nil},               // disabled: outside the filter
		{"*", "alice-pw", auth.Refused, nil},                   // a filter wildcard is a literal '*'
		{"alice)(uid=*", "alice-pw", auth.Refused, nil},        // no filter injection
		{"alice,ou=people", "alice-pw", auth.Refused, nil},     // no DN injection
		{"Alice", "alice-pw", auth.Accepted, []string{"devs"}}, // the directory's matching rules
	}
	tests := []struct {
		name string
		cfg  auth.LDAPConfig
		// canonical: the user name is the entry's uid, not as typed.
		canonical bool
	}{
		{"search then bind, memberOf", search, false},
		{"search then bind, group search", groupSearch, false},
		{"direct bind", direct, false},
		{"StartTLS", startTLS, false},
		{"ldaps", ldaps, false},
		{"search then bind, the name from uid", named, true},
		{"direct bind, the name from uid", directNamed, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := auth.NewLDAP(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, err := auth.New(auth.Config{Providers: []auth.Provider{p}})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range checks {
				r := a.Authenticate(basicValue(c.user, c.pass))
				wantUser := ""
				if c.want == auth.Accepted {
					wantUser = c.user
					if tt.canonical {
						wantUser = strings.ToLower(c.user)
					}
				}
				if r.Outcome != c.want || r.User != wantUser || !slices.Equal(r.Groups, c.groups) {
					t.Errorf("%s / %q: got %v %q %q, want %v %q %q", c.user, c.pass, r.Outcome, r.User, r.Groups, c.want, wantUser, c.groups)
				}
			}
		})
	}
}

// TestLDAPUnavailable stops the directory mid-run: credentials already
// verified stay accepted from the cache, others are Unavailable (never
// accepted, never refused as wrong), and once the directory is back
// they are verified again.
func TestLDAPUnavailable(t *testing.T) {
	d := proxytest.StartSlapd(t, proxytest.DirectoryLDIF)
	p, err := auth.NewLDAP(auth.LDAPConfig{
		URL: d.URL, InsecurePlaintext: true, BindDN: "cn=svc,dc=example,dc=org", BindPassword: "svc-pw",
		BaseDN: "ou=people,dc=example,dc=org", UserFilter: activeFilter, Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	a, err := auth.New(auth.Config{Providers: []auth.Provider{p}})
	if err != nil {
		t.Fatal(err)
	}
	if r := a.Authenticate(basicValue("alice", "alice-pw")); r.Outcome != auth.Accepted {
		t.Fatalf("alice before the stop: %v", r.Outcome)
	}
	if r := a.Authenticate(basicValue("alice", "wrong")); r.Outcome != auth.Refused {
		t.Fatalf("a wrong password before the stop: %v", r.Outcome)
	}
	d.Stop()
	for _, c := range []struct {
		user, pass string
		want       auth.Outcome
	}{
		{"alice", "alice-pw", auth.Accepted}, // cached
		{"alice", "wrong", auth.Refused},     // cached too
		{"bob", "bob-pw", auth.Unavailable},
		{"bob", "wrong", auth.Unavailable},
		{"bob", "bob-pw", auth.Unavailable}, // not cached
	} {
		if r := a.Authenticate(basicValue(c.user, c.pass)); r.Outcome != c.want {
			t.Errorf("%s / %s with the directory stopped: %v, want %v", c.user, c.pass, r.Outcome, c.want)
		}
	}
	d.Start()
	// The provider waits a second after a failure before asking again.
	proxytest.WaitFor(t, "bob accepted after the restart", func() bool {
		r := a.Authenticate(basicValue("bob", "bob-pw"))
		if r.Outcome == auth.Refused {
			t.Fatalf("bob after the restart: %v", r.Outcome)
		}
		return r.Outcome == auth.Accepted
	})
	if r := a.Authenticate(basicValue("bob", "wrong")); r.Outcome != auth.Refused {
		t.Errorf("a wrong password after the restart: %v", r.Outcome)
	}
}

// TestLDAPConfig checks NewLDAP's refusals: plain text only when allowed
// and only to loopback, StartTLS only on ldap://, and a way to find users.
func TestLDAPConfig(t *testing.T) {
	ok := auth.LDAPConfig{URL: "ldaps://ldap.example.org", BaseDN: "dc=example,dc=org", UserFilter: "(uid={user})"}
	tests := []struct {
		name   string
		modify func(c *auth.LDAPConfig)
		ok     bool
	}{
		{"ldaps", func(*auth.LDAPConfig) {}, true},
		{"ldap with StartTLS", func(c *auth.LDAPConfig) { c.URL, c.StartTLS = "ldap://ldap.example.org", true }, true},
		{"plain ldap", func(c *auth.LDAPConfig) { c.URL = "ldap://ldap.example.org" }, false},
		{"plain ldap allowed, not loopback", func(c *auth.LDAPConfig) { c.URL, c.InsecurePlaintext = "ldap://ldap.example.org", true }, false},
		{"plain ldap allowed, loopback", func(c *auth.LDAPConfig) { c.URL, c.InsecurePlaintext = "ldap://127.0.0.1:389", true }, true},
		{"StartTLS on ldaps", func(c *auth.LDAPConfig) { c.StartTLS = true }, false},
		{"another scheme", func(c *auth.LDAPConfig) { c.URL = "http://ldap.example.org" }, false},
		{"no filter", func(c *auth.LDAPConfig) { c.UserFilter = "" }, false},
		{"filter without {user}", func(c *auth.LDAPConfig) { c.UserFilter = "(uid=alice)" }, false},
		{"direct bind", func(c *auth.LDAPConfig) { c.BaseDN, c.UserFilter, c.UserDN = "", "", "uid={user},dc=example,dc=org" }, true},
		{"template without {user}", func(c *auth.LDAPConfig) { c.UserDN = "uid=alice,dc=example,dc=org" }, false},
		{"bad group DN", func(c *auth.LDAPConfig) { c.Groups = map[string][]string{"g": {"not a dn"}} }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.modify(&c)
			_, err := auth.NewLDAP(c)
			if (err == nil) != tt.ok {
				t.Errorf("NewLDAP: %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestLDAPHangingDirectory checks that a directory that accepts
// connections and then says nothing (over ldap://, StartTLS or ldaps://),
// or grants StartTLS and then stalls the TLS handshake, is Unavailable
// within the timeout, not a request that hangs.
func TestLDAPHangingDirectory(t *testing.T) {
	silent := hangingDirectory(t, false)
	stalling := hangingDirectory(t, true)
	base := auth.LDAPConfig{BaseDN: "dc=example,dc=org", UserFilter: "(uid={user})", Timeout: 300 * time.Millisecond}
	for _, tt := range []struct {
		name   string
		modify func(c *auth.LDAPConfig)
	}{
		{"ldap", func(c *auth.LDAPConfig) { c.URL, c.InsecurePlaintext = "ldap://"+silent, true }},
		{"StartTLS", func(c *auth.LDAPConfig) { c.URL, c.StartTLS = "ldap://"+silent, true }},
		{"StartTLS granted, then no handshake", func(c *auth.LDAPConfig) { c.URL, c.StartTLS = "ldap://"+stalling, true }},
		{"ldaps", func(c *auth.LDAPConfig) { c.URL = "ldaps://" + silent }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.modify(&c)
			p, err := auth.NewLDAP(c)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if v := p.VerifyPassword([]byte("alice"), []byte("pw")); v.Outcome != auth.Unavailable {
				t.Errorf("a silent directory: %v, want unavailable", v.Outcome)
			}
			if d := time.Since(start); d > 3*time.Second {
				t.Errorf("took %v with a timeout of 300ms", d)
			}
		})
	}
}

// startTLSGranted is an LDAP ExtendedResponse to message 1 with the
// result success: what a directory answers a StartTLS request with.
var startTLSGranted = []byte{0x30, 0x0c, 0x02, 0x01, 0x01, 0x78, 0x07, 0x0a, 0x01, 0x00, 0x04, 0x00, 0x04, 0x00}

// hangingDirectory returns the address of a listener that holds every
// connection open and answers nothing, or, with grant, answers the first
// request (a StartTLS) with success and then nothing.
func hangingDirectory(t *testing.T, grant bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	held := make(chan net.Conn, 16)
	conns.Add(1)
	go func() {
		defer conns.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if grant {
				buf := make([]byte, 512)
				c.Read(buf) // the StartTLS request, in one segment on loopback
				c.Write(startTLSGranted)
			}
			held <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		conns.Wait()
		close(held)
		for c := range held {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// groupsHiddenAccess makes ou=groups readable by the service account
// only: a bound user who searches it is answered No Such Object.
const groupsHiddenAccess = `access to attrs=userPassword by anonymous auth by * none
access to dn.subtree="ou=groups,dc=example,dc=org" by dn.exact="cn=svc,dc=example,dc=org" read by * none
access to * by users read by anonymous auth
`

// TestLDAPDirectoryAnswers runs against a slapd whose group subtree only
// the service account may read. The group search is made with the
// service account's rights, so users get their groups; and an answer of
// the directory that is no verdict on the password (No Such Object for a
// base that does not exist, or that the user may not see) refuses the
// user: it is never Unavailable, which only a directory that cannot be
// asked is.
func TestLDAPDirectoryAnswers(t *testing.T) {
	d := proxytest.StartSlapdAccess(t, proxytest.DirectoryLDIF, groupsHiddenAccess)
	groupSearch := auth.LDAPConfig{
		URL: d.URL, InsecurePlaintext: true, BindDN: "cn=svc,dc=example,dc=org", BindPassword: "svc-pw",
		BaseDN: "ou=people,dc=example,dc=org", UserFilter: activeFilter, Groups: ldapGroups,
		GroupBaseDN: "ou=groups,dc=example,dc=org", GroupFilter: "(&(objectClass=groupOfNames)(member={dn}))",
	}
	missingGroupBase := groupSearch
	missingGroupBase.GroupBaseDN = "ou=nowhere,dc=example,dc=org"
	missingUserBase := groupSearch
	missingUserBase.BaseDN = "ou=nowhere,dc=example,dc=org"
	directHidden := auth.LDAPConfig{ // no service account: the user searches, and may not see the groups
		URL: d.URL, InsecurePlaintext: true, UserDN: "uid={user},ou=people,dc=example,dc=org", Groups: ldapGroups,
		GroupBaseDN: "ou=groups,dc=example,dc=org", GroupFilter: "(&(objectClass=groupOfNames)(member={dn}))",
	}
	type check struct {
		user, pass string
		want       auth.Outcome
		groups     []string
	}
	const answerLine = "refused for the directory's answer"
	for _, tt := range []struct {
		name   string
		cfg    auth.LDAPConfig
		checks []check
		// warned: the refusals are the directory's answers, which are
		// logged (once within the interval), not wrong passwords.
		warned bool
	}{
		{"group search as the service account", groupSearch, []check{
			{"alice", "alice-pw", auth.Accepted, []string{"devs"}},
			{"bob", "bob-pw", auth.Accepted, []string{"ops"}},
			{"alice", "wrong", auth.Refused, nil},
			{"carol", "carol-pw", auth.Refused, nil},
		}, false},
		{"group base that does not exist", missingGroupBase, []check{
			{"alice", "alice-pw", auth.Refused, nil}, {"bob", "bob-pw", auth.Refused, nil}}, true},
		{"user base that does not exist", missingUserBase, []check{{"alice", "alice-pw", auth.Refused, nil}}, true},
		{"direct bind, groups the user may not read", directHidden, []check{{"alice", "alice-pw", auth.Refused, nil}}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var logs bytes.Buffer // VerifyPassword logs on the caller's goroutine
			cfg := tt.cfg
			cfg.Name, cfg.Logger = "corp", slog.New(slog.NewTextHandler(&logs, nil))
			p, err := auth.NewLDAP(cfg)
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range tt.checks {
				v := p.VerifyPassword([]byte(c.user), []byte(c.pass))
				if v.Outcome != c.want || !slices.Equal(v.Groups, c.groups) {
					t.Errorf("%s / %q: got %v %q, want %v %q", c.user, c.pass, v.Outcome, v.Groups, c.want, c.groups)
				}
			}
			want := 0
			if tt.warned {
				want = 1
			}
			if n := strings.Count(logs.String(), answerLine); n != want {
				t.Errorf("%d log lines of refusals for the directory's answer, want %d:\n%s", n, want, logs.String())
			}
			if tt.warned && (strings.Count(logs.String(), "provider=corp") != 1 || !strings.Contains(logs.String(), "No Such Object")) {
				t.Errorf("the line should name the provider once and the directory's answer:\n%s", logs.String())
			}
		})
	}
}
