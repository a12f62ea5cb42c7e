package wire

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/lists"
)

// TestListsAndAudit checks what Build makes of lists and audit modes: a
// file a rule and a route both name is read once, into one list both
// match by; a URL's list is the registry's, one across generations; a
// listener audits as its acl_mode, else acl.mode, says; and a file that
// does not load fails the build naming its key.
func TestListsAndAudit(t *testing.T) {
	dir := t.TempDir()
	ads := filepath.Join(dir, "ads.txt")
	if err := os.WriteFile(ads, []byte(".ads.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := func() *config.Config {
		c := config.Default()
		c.Listen = []config.Listener{
			{Name: "audit", Address: "127.0.0.1:0", ACLMode: config.ACLAudit},
			{Name: "default", Address: "127.0.0.1:0"},
		}
		c.ACL.Default = acl.Allow
		c.ACL.Rules = []config.ACLRule{
			{Name: "ads", Action: acl.Deny, Criteria: config.Criteria{HostsFile: ads, HostsURL: "https://lists.invalid/more.txt"}},
		}
		c.Routes = []config.Route{{Name: "ads-direct", Criteria: config.Criteria{HostsFile: ads}, Via: config.Strings{"direct"}}}
		c.SetDefaults()
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	reg := lists.NewRegistry(nil)
	t.Cleanup(reg.Close)
	env := &Env{Lists: reg}
	g, err := Build(cfg(), env, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Lists) != 2 {
		t.Fatalf("%d lists, want the file's and the URL's", len(g.Lists))
	}
	r := acl.Request{Client: netip.MustParseAddr("192.0.2.1"), Host: "www.ads.example", Port: 443, Protocol: acl.Connect}
	audit, enforce := g.Listeners[0].Policy.ACL, g.Listeners[1].Policy.ACL
	if d := audit.Decide(r); !d.Allow || d.WouldDeny != "ads" {
		t.Errorf("listener audit: %v would deny %q, want allowed, would deny ads", d.Allow, d.WouldDeny)
	}
	if d := enforce.Decide(r); d.Allow || d.Rule != "ads" {
		t.Errorf("listener default: %v %q, want denied by ads", d.Allow, d.Rule)
	}
	// The URL's list never loaded: the deny rule matches every request.
	if d := enforce.Decide(acl.Request{Host: "other.example", Port: 443}); d.Allow {
		t.Error("a deny rule with a list not loaded allows")
	}
	if rt := g.Routes.Match(r); rt.Name() != "ads-direct" {
		t.Errorf("route %q, want ads-direct by the file", rt.Name())
	}
	c2 := cfg()
	c2.ACL.Mode = config.ACLAudit
	c2.Listen[0].ACLMode = config.ACLEnforce
	g2, err := Build(c2, env, g)
	if err != nil {
		t.Fatal(err)
	}
	if g2.Lists[1] != g.Lists[1] || g2.Lists[0] == g.Lists[0] {
		t.Error("a reload made a new list of the URL, or kept the file's without reading it again")
	}
	if d := g2.Listeners[0].Policy.ACL.Decide(r); d.Allow {
		t.Error(`acl_mode = "enforce" under acl.mode = "audit" lets a denied request through`)
	}
	if d := g2.Listeners[1].Policy.ACL.Decide(r); !d.Allow || d.WouldDeny != "ads" {
		t.Error(`acl.mode = "audit" does not reach a listener without acl_mode`)
	}
	c3 := cfg()
	c3.Routes[0].HostsFile = filepath.Join(dir, "missing.txt")
	if _, err := Build(c3, env, g); err == nil || !strings.Contains(err.Error(), "routes[0].hosts_file: open ") {
		t.Errorf("Build with a missing route list = %v", err)
	}
}
