package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

const routesTOML = `[[listen]]
address = "127.0.0.1:3128"

[acl.groups]
fleet = ["bob"]

[[parents]]
name = "squid"
url = "http://rustle:pw@127.0.0.1:13128"

[[parents]]
name = "dante"
url = "socks5h://127.0.0.1:1080"
connect_timeout = "3s"
probe_interval = "5s"
probe_target = "example.com:443"

[[routes]]
name = "intranet"
hosts = [".corp.example"]
via = "direct"

[[routes]]
groups = ["fleet"]
via = ["squid", "dante"]
select = "hash-session"
fallback = "direct"
`

// TestRoutesParse checks that parents and routes decode, via as one
// string or a list, with their defaults.
func TestRoutesParse(t *testing.T) {
	c, err := Parse([]byte(routesTOML), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	wantParents := []Parent{
		{Name: "squid", URL: "http://rustle:pw@127.0.0.1:13128", ConnectTimeout: Duration{10 * time.Second},
			IdleTimeout: c.Upstream.IdleTimeout, MaxFails: 3, FailWindow: Duration{10 * time.Second}, Cooldown: Duration{30 * time.Second}},
		{Name: "dante", URL: "socks5h://127.0.0.1:1080", ConnectTimeout: Duration{3 * time.Second},
			IdleTimeout: c.Upstream.IdleTimeout, MaxFails: 3, FailWindow: Duration{10 * time.Second}, Cooldown: Duration{30 * time.Second},
			ProbeInterval: Duration{5 * time.Second}, ProbeTarget: "example.com:443"},
	}
	if diff := cmp.Diff(wantParents, c.Parents); diff != "" {
		t.Errorf("parents (-want +got):\n%s", diff)
	}
	wantRoutes := []Route{
		{Name: "intranet", Criteria: Criteria{Hosts: []string{".corp.example"}}, Via: Strings{"direct"}},
		{Name: "routes[1]", Criteria: Criteria{Who: Who{Groups: []string{"fleet"}}}, Via: Strings{"squid", "dante"}, Select: "hash-session",
			Fallback: "direct", SessionSeparator: "-session-"},
	}
	if diff := cmp.Diff(wantRoutes, c.Routes); diff != "" {
		t.Errorf("routes (-want +got):\n%s", diff)
	}
	if rc := c.RouteConfig(); len(rc.Parents) != 2 || len(rc.Routes) != 2 || rc.Routes[1].Match.Groups[0] != "fleet" {
		t.Errorf("RouteConfig = %+v", rc)
	}
}

// TestRoutesFileAndLine checks that bad parents and routes are refused
// with the key and its line.
func TestRoutesFileAndLine(t *testing.T) {
	src := `[[listen]]
address = "0.0.0.0:3128"
auth = "none"
allow_open = true

[[parents]]
name = "squid"
url = "gopher://h:1"

[[parents]]
name = "squid"
url = "http://localhost:3128"

[[parents]]
name = "bad name"
url = "https://p.example:443"
connect_timeout = "-1s"

[[parents]]
name = "s5"
url = "socks5://127.0.0.1:1080"
ca_file = "ca.pem"
probe_target = "example.com:80"

[[routes]]
name = "a"
via = ["squid", "nope"]
select = "fastest"

[[routes]]
name = "a"
hosts = ["a b"]
via = "direct"
fallback = "direct"

[[routes]]
groups = ["nogroup"]
via = ["s5", "direct", "s5"]
fallback = "squid"

[[routes]]
ports = ["443"]

[[routes]]
name = "egress"
via = "direct"
egress = { bind = ["not-an-address"] }
resolvers = ["ftp://dns.example"]
`
	c, err := Parse([]byte(src), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := errorStrings(t, c.Validate())
	want := []string{
		`r.toml:8: parents[0].url: route: scheme "gopher" is not http, https, socks5 or socks5h`,
		`r.toml:11: parents[1].name: "squid" is also the name of parents[0]`,
		`r.toml:12: parents[1].url: parent localhost:3128 is rustle's own listener listen[0] (0.0.0.0:3128): a loop`,
		`r.toml:15: parents[2].name: "bad name": use letters, digits, '-' and '_'`,
		`r.toml:17: parents[2].connect_timeout: -1s is not positive`,
		`r.toml:22: parents[3].ca_file: is only for https parents`,
		`r.toml:23: parents[3].probe_target: a socks5 parent's probe target is an IP address (rustle resolves for it)`,
		`r.toml:23: parents[3].probe_target: needs probe_interval`,
		`r.toml:27: routes[0].via[1]: parent "nope" is not defined in [[parents]]`,
		`r.toml:28: routes[0].select: "fastest" is not one of round-robin, random, first-available, hash-host, hash-user, hash-session`,
		`r.toml:31: routes[1].name: "a" is also the name of routes[0]`,
		`r.toml:32: routes[1].hosts[0]: "a b" is not a host name, *.suffix, .suffix, IP address or CIDR prefix`,
		`r.toml:34: routes[1].fallback: is for routes through parents`,
		`r.toml:37: routes[2].groups[0]: group "nogroup" is not defined in [acl.groups] nor by an [[auth.providers]] entry's groups`,
		`r.toml:38: routes[2].via[1]: "direct" cannot be one of a list of parents; use fallback = "direct"`,
		`r.toml:38: routes[2].via[2]: parent "s5" is named twice`,
		`r.toml:39: routes[2].fallback: "squid" is neither "direct" nor empty`,
		`r.toml:41: routes[3]: via is required: "direct", a parent's name or a list of them`,
		`r.toml:47: routes[4].egress.bind[0]: "not-an-address" is not an IP address or a CIDR prefix`,
		`r.toml:48: routes[4].resolvers[0]: resolver "ftp://dns.example": scheme "ftp" is not udp, tcp, tls or https`,
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Validate errors lack\n  %s\ngot:\n  %s", w, strings.Join(got, "\n  "))
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d errors, want %d:\n  %s", len(got), len(want), strings.Join(got, "\n  "))
	}
	for _, g := range got {
		if strings.Contains(g, "pw") {
			t.Errorf("error %q shows a password", g)
		}
	}
}

// TestListenerAt checks the loop detection between parents and
// listeners.
func TestListenerAt(t *testing.T) {
	c := &Config{Listen: []Listener{listener("127.0.0.1:3128"), listener(":8080"), listener("[::1]:1080"), listener("proxy.example:9000")}}
	for _, tt := range []struct {
		addr string
		want bool
	}{
		{"127.0.0.1:3128", true},
		{"localhost:3128", true},
		{"127.0.0.2:3128", true}, // loopback reaches a loopback listener on the port
		{"10.0.0.1:3128", false},
		{"127.0.0.1:8080", true}, // a listener on every address
		{"192.0.2.1:8080", false},
		{"[::1]:1080", true},
		{"proxy.example:9000", true},
		{"other.example:9000", false},
		{"127.0.0.1:3129", false},
		// Other spellings of the same hosts (issue 27 item 7): a trailing
		// dot, case, and the IPv4 spellings inet_aton reads.
		{"localhost.:3128", true},
		{"LocalHost.:3128", true},
		{"127.1:3128", true},
		{"2130706433:3128", true},
		{"0x7f000001:3128", true},
		{"0177.0.0.1:3128", true},
		{"127.0.0.1.:3128", true},
		{"[::ffff:127.0.0.1]:3128", true},
		{"proxy.example.:9000", true},
		{"PROXY.example:9000", true},
		{"localhost.:3129", false},
	} {
		if _, got := c.listenerAt(tt.addr); got != tt.want {
			t.Errorf("listenerAt(%s) = %v, want %v", tt.addr, got, tt.want)
		}
	}
}

// TestAddForward checks -F: one parent and a catch-all route, after the
// file's routes; a second -F and a bad URL are refused without the
// password.
func TestAddForward(t *testing.T) {
	c, err := Parse([]byte(routesTOML), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddForward("http://u:secret@parent.example:3128"); err != nil {
		t.Fatal(err)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	last := c.Routes[len(c.Routes)-1]
	if last.Name != ForwardName || !slices.Equal(last.Via, Strings{ForwardName}) || len(last.Hosts) != 0 {
		t.Errorf("-F route %+v", last)
	}
	if p := c.Parents[len(c.Parents)-1]; p.Name != ForwardName || p.URL != "http://u:secret@parent.example:3128" {
		t.Errorf("-F parent %+v", p)
	}
	if err := c.AddForward("http://parent2.example:3128"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("second -F: %v", err)
	}
	d := Default()
	if err := d.AddForward("ftp://u:secret@p:21"); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("bad -F: %v", err)
	}
}
