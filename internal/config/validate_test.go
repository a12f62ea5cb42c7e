package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/crypto/bcrypt"
)

// errorKeys returns the Key of each *Error joined in err.
func errorKeys(t *testing.T, err error) []string {
	t.Helper()
	var keys []string
	for _, e := range unwrapAll(err) {
		if e == nil {
			continue
		}
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("error %T %q is not a *config.Error", e, e)
		}
		if ce.File != "" || !strings.HasPrefix(ce.Error(), "config: "+ce.Key+": ") {
			t.Errorf("error %q: want a config: prefix and the key %q, no file", ce, ce.Key)
		}
		keys = append(keys, ce.Key)
	}
	return keys
}

// listener returns a plain HTTP listener named after its address.
func listener(addr string) Listener {
	return Listener{Name: addr, Address: addr, Protocol: "http"}
}

func TestValidate(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	alice := User{Name: "alice", Password: "secret"}

	type test struct {
		name   string
		modify func(c *Config)
		want   []string // keys of the errors, in order
	}
	tests := []test{
		{"default", func(c *Config) {}, nil},
		{"workers negative", func(c *Config) { c.Workers = -1 }, []string{"workers"}},
		{"workers positive", func(c *Config) { c.Workers = 8 }, nil},
		{"socket buffer negative", func(c *Config) { c.SocketBufferBytes = -1 }, []string{"socket_buffer_bytes"}},
		{"socket buffer set", func(c *Config) { c.SocketBufferBytes = 1 << 20 }, nil},
		{"gc floor off", func(c *Config) { c.GCFloorBytes = -1 }, nil},
		{"gc floor set", func(c *Config) { c.GCFloorBytes = 16 << 20 }, nil},
		{"gc floor negative", func(c *Config) { c.GCFloorBytes = -2 }, []string{"gc_floor_bytes"}},
		{"forwarded unknown", func(c *Config) { c.Forwarded = "all" }, []string{"forwarded"}},
		{"forwarded empty", func(c *Config) { c.Forwarded = "" }, []string{"forwarded"}},
		{"forwarded rfc7239", func(c *Config) { c.Forwarded = "rfc7239" }, nil},
		{"forwarded x-forwarded-for", func(c *Config) { c.Forwarded = "x-forwarded-for" }, nil},
		{"max header bytes zero", func(c *Config) { c.MaxHeaderBytes = 0 }, []string{"max_header_bytes"}},
		{"log level", func(c *Config) { c.Log.Level = "trace" }, []string{"log.level"}},
		{"log level debug", func(c *Config) { c.Log.Level = "debug" }, nil},
		{"log format", func(c *Config) { c.Log.Format = "xml" }, []string{"log.format"}},
		{"log format json", func(c *Config) { c.Log.Format = "json" }, nil},
		{"access log format", func(c *Config) { c.AccessLog.Format = "clf" }, []string{"access_log.format"}},
		{"access log format empty", func(c *Config) { c.AccessLog.Format = "" }, []string{"access_log.format"}},
		{"access log json to a file", func(c *Config) {
			c.AccessLog = AccessLog{Enabled: true, Format: "json", Path: "/var/log/rustle/access.log"}
		}, nil},
		{"access log path with NUL", func(c *Config) { c.AccessLog.Path = "/tmp/a\x00b" }, []string{"access_log.path"}},
		{"access log squid", func(c *Config) { c.AccessLog.Format = "squid" }, nil},
		{"access log common", func(c *Config) { c.AccessLog.Format = "common" }, nil},
		{"access log combined", func(c *Config) { c.AccessLog.Format = "combined" }, nil},
		{"access log template", func(c *Config) {
			c.AccessLog.Format, c.AccessLog.Template = "template", "{combined} {upstream} {source}"
		}, nil},
		{"access log template unknown field", func(c *Config) {
			c.AccessLog.Format, c.AccessLog.Template = "template", "{time} {password}"
		}, []string{"access_log.template"}},
		{"access log template with a newline", func(c *Config) {
			c.AccessLog.Format, c.AccessLog.Template = "template", "{time}\n{user}"
		}, []string{"access_log.template"}},
		{"access log format template without one", func(c *Config) { c.AccessLog.Format = "template" }, []string{"access_log.format"}},
		{"access log template for json", func(c *Config) {
			c.AccessLog.Format, c.AccessLog.Template = "json", "{time}"
		}, []string{"access_log.template"}},
		{"metrics max users zero", func(c *Config) { c.Metrics.MaxUsers = 0 }, []string{"metrics.max_users"}},
		{"http2 streams zero", func(c *Config) { c.HTTP2.MaxConcurrentStreams = 0 }, []string{"http2.max_concurrent_streams"}},
		{"http2 header list zero", func(c *Config) { c.HTTP2.MaxHeaderListSize = 0 }, []string{"http2.max_header_list_size"}},
		{"http2 stream window small", func(c *Config) { c.HTTP2.InitialStreamWindow = 65534 }, []string{"http2.initial_stream_window"}},
		{"http2 conn window large", func(c *Config) { c.HTTP2.InitialConnWindow = 1 << 31 }, []string{"http2.initial_conn_window"}},
		{"http2 frame size small", func(c *Config) { c.HTTP2.MaxFrameSize = 16383 }, []string{"http2.max_frame_size"}},
		{"http2 frame size large", func(c *Config) { c.HTTP2.MaxFrameSize = 1 << 24 }, []string{"http2.max_frame_size"}},
		{"http2 at their limits", func(c *Config) {
			c.HTTP2 = HTTP2{MaxConcurrentStreams: 1, MaxHeaderListSize: 16 << 20, InitialStreamWindow: 65535,
				InitialConnWindow: 1<<31 - 1, MaxFrameSize: 1<<24 - 1}
		}, nil},
		{"metrics per user", func(c *Config) { c.Metrics = Metrics{PerUser: true, MaxUsers: 5} }, nil},
		{"admin loopback", func(c *Config) { c.Admin = "127.0.0.1:9090" }, nil},
		{"admin port 0", func(c *Config) { c.Admin = "127.0.0.1:0" }, nil},
		{"admin all addresses without authentication", func(c *Config) { c.Admin = ":9090" }, []string{"admin"}},
		{"admin wildcard without authentication", func(c *Config) { c.Admin = "0.0.0.0:9090" }, []string{"admin"}},
		{"admin on an interface without authentication", func(c *Config) { c.Admin = "192.0.2.7:9090" }, []string{"admin"}},
		{"admin on a name without authentication", func(c *Config) { c.Admin = "admin.example:9090" }, []string{"admin"}},
		{"admin all addresses with a token", func(c *Config) {
			c.Admin = ":9090"
			c.AdminAccess.TokenFile = "/etc/rustle/admin.token"
		}, nil},
		{"admin all addresses with htpasswd", func(c *Config) {
			c.Admin = "[::]:9090"
			c.AdminAccess.Htpasswd = "/etc/rustle/admin.htpasswd"
		}, nil},
		{"admin all addresses, health and metrics only", func(c *Config) {
			c.Admin = "0.0.0.0:9090"
			c.AdminAccess.HealthAndMetricsOnly = true
		}, nil},
		{"admin localhost", func(c *Config) { c.Admin = "localhost:9090" }, nil},
		{"admin hosts", func(c *Config) {
			c.Admin = "127.0.0.1:9090"
			c.AdminAccess.Hosts = []string{"rustle-admin.example", "192.0.2.7", "2001:db8::1", "bad host", "a.example:9090", ""}
		}, []string{"admin_access.hosts[3]", "admin_access.hosts[4]", "admin_access.hosts[5]"}},
		{"admin ipv6", func(c *Config) { c.Admin = "[::1]:9090" }, nil},
		{"admin no port", func(c *Config) { c.Admin = "127.0.0.1" }, []string{"admin"}},
		{"admin bad port", func(c *Config) { c.Admin = "127.0.0.1:99999" }, []string{"admin"}},
		{"admin unbracketed ipv6", func(c *Config) { c.Admin = "::1:9090" }, []string{"admin"}},
		{"admin on a listener's address", func(c *Config) { c.Admin = "127.0.0.1:3128" }, []string{"admin"}},
		{"admin on a listener's address, other spelling", func(c *Config) {
			c.Listen = []Listener{listener("[::1]:3128")}
			c.Admin = "[0:0::1]:3128"
		}, []string{"admin"}},
		{"max idle per host -1", func(c *Config) { c.Upstream.MaxIdlePerHost = -1 }, nil},
		{"max idle per host -2", func(c *Config) { c.Upstream.MaxIdlePerHost = -2 }, []string{"upstream.max_idle_per_host"}},
		{"max idle per host 0", func(c *Config) { c.Upstream.MaxIdlePerHost = 0 }, []string{"upstream.max_idle_per_host"}},
		{"max idle negative", func(c *Config) { c.Upstream.MaxIdle = -1 }, []string{"upstream.max_idle"}},
		{"realm empty", func(c *Config) { c.Auth.Realm = "" }, []string{"auth.realm"}},
		{"realm with CRLF", func(c *Config) { c.Auth.Realm = "r\r\nX-Evil: 1" }, []string{"auth.realm"}},
		{"realm with quote", func(c *Config) { c.Auth.Realm = `r"` }, []string{"auth.realm"}},
		{"realm with spaces", func(c *Config) { c.Auth.Realm = "my proxy" }, nil},
		{"htpasswd path empty", func(c *Config) { c.Auth.Htpasswd = []string{"/a", ""} }, []string{"auth.htpasswd[1]"}},
		{"cache size negative", func(c *Config) { c.Auth.CacheSize = -1 }, []string{"auth.cache_size"}},

		{"user valid password", func(c *Config) { c.Auth.Users = []User{alice} }, nil},
		{"user valid bcrypt", func(c *Config) { c.Auth.Users = []User{{Name: "bob", Bcrypt: string(hash)}} }, nil},
		{"user name empty", func(c *Config) { c.Auth.Users = []User{{Password: "p"}} }, []string{"auth.users[0].name"}},
		{"user name with colon", func(c *Config) { c.Auth.Users = []User{{Name: "a:b", Password: "p"}} }, []string{"auth.users[0].name"}},
		{"user names repeated", func(c *Config) { c.Auth.Users = []User{alice, {Name: "bob", Password: "x"}, alice} },
			[]string{"auth.users[2].name"}},
		{"user with password and bcrypt", func(c *Config) { c.Auth.Users = []User{{Name: "a", Password: "p", Bcrypt: string(hash)}} },
			[]string{"auth.users[0]"}},
		{"user with neither", func(c *Config) { c.Auth.Users = []User{{Name: "a"}} }, []string{"auth.users[0]"}},
		{"user bcrypt wrong prefix", func(c *Config) { c.Auth.Users = []User{{Name: "a", Bcrypt: "$1$" + string(hash[4:])}} },
			[]string{"auth.users[0].bcrypt"}},
		{"user bcrypt truncated", func(c *Config) { c.Auth.Users = []User{{Name: "a", Bcrypt: string(hash[:20])}} },
			[]string{"auth.users[0].bcrypt"}},

		{"no listeners", func(c *Config) { c.Listen = nil }, []string{"listen"}},
		{"address IPv6 loopback", func(c *Config) { c.Listen = []Listener{listener("[::1]:3128")} }, nil},
		{"address localhost", func(c *Config) { c.Listen = []Listener{listener("LocalHost:3128")} }, nil},
		{"address in 127/8", func(c *Config) { c.Listen = []Listener{listener("127.4.5.6:3128")} }, nil},
		{"address port 0", func(c *Config) { c.Listen = []Listener{listener("127.0.0.1:0")} }, nil},
		{"address without port", func(c *Config) { c.Listen = []Listener{listener("127.0.0.1")} }, []string{"listen[0].address"}},
		{"address empty", func(c *Config) { c.Listen = []Listener{listener("")} }, []string{"listen[0].address"}},
		{"address IPv6 unbracketed", func(c *Config) { c.Listen = []Listener{listener("::1:3128")} }, []string{"listen[0].address"}},
		{"address IPv4 bracketed", func(c *Config) { c.Listen = []Listener{listener("[127.0.0.1]:3128")} }, []string{"listen[0].address"}},
		{"address port name", func(c *Config) { c.Listen = []Listener{listener("127.0.0.1:http")} }, []string{"listen[0].address"}},
		{"address port too big", func(c *Config) { c.Listen = []Listener{listener("127.0.0.1:65536")} }, []string{"listen[0].address"}},
		{"address bad host", func(c *Config) { c.Listen = []Listener{listener("local host:3128")} }, []string{"listen[0].address"}},
		{"protocol unknown", func(c *Config) { c.Listen[0].Protocol = "gopher" }, []string{"listen[0].protocol"}},
		{"protocol socks5", func(c *Config) { c.Listen[0].Protocol = "socks5" }, nil},
		{"protocol mixed", func(c *Config) { c.Listen[0].Protocol = "mixed" }, nil},
		{"protocol socks4", func(c *Config) { c.Listen[0].Protocol = "socks4" }, []string{"listen[0].protocol"}},
		{"protocol upper case", func(c *Config) { c.Listen[0].Protocol = "SOCKS5" }, []string{"listen[0].protocol"}},
		{"protocol empty", func(c *Config) { c.Listen[0].Protocol = "" }, []string{"listen[0].protocol"}},
		{"auth unknown", func(c *Config) { c.Listen[0].Auth = "digest" }, []string{"listen[0].auth"}},
		{"auth none", func(c *Config) { c.Listen[0].Auth = "none" }, nil},
		{"auth basic without users", func(c *Config) { c.Listen[0].Auth = "basic" }, []string{"listen[0].auth"}},
		{"auth basic with inline users", func(c *Config) { c.Listen[0].Auth = "basic"; c.Auth.Users = []User{alice} }, nil},
		{"auth basic with htpasswd", func(c *Config) { c.Listen[0].Auth = "basic"; c.Auth.Htpasswd = []string{"/etc/h"} }, nil},
		{"listener users", func(c *Config) {
			c.Auth.Users = []User{alice, {Name: "bob", Password: "x"}}
			c.Listen[0].Users = []string{"bob"}
		}, nil},
		{"listener users from htpasswd files", func(c *Config) {
			// Whether carol is in the files is known once they are read:
			// the server checks it.
			c.Auth.Htpasswd = []string{"/etc/h"}
			c.Listen[0].Users = []string{"carol"}
		}, nil},
		{"listener users without users", func(c *Config) { c.Listen[0].Users = []string{"alice"} }, []string{"listen[0].users"}},
		{"listener users with auth none", func(c *Config) {
			c.Auth.Users = []User{alice}
			c.Listen[0].Auth, c.Listen[0].Users = "none", []string{"alice"}
		}, []string{"listen[0].users"}},
		{"listener users on a -L listener", func(c *Config) {
			c.Listen[0].Auth, c.Listen[0].URLUser = "basic", &User{Name: "dave", Password: "d"}
			c.Listen[0].Users = []string{"dave"}
		}, []string{"listen[0].users"}},
		{"listener user names", func(c *Config) {
			c.Auth.Users = []User{alice}
			c.Listen[0].Users = []string{"alice", "", "a:b", "alice"}
		}, []string{"listen[0].users[1]", "listen[0].users[2]", "listen[0].users[3]"}},
		{"-L user makes auth basic", func(c *Config) {
			c.Listen = []Listener{listener(":3128")}
			c.Listen[0].Auth, c.Listen[0].URLUser = "basic", &User{Name: "dave", Password: "d"}
		}, nil},
		{"open: beside a -L user", func(c *Config) {
			// A -L URL's user is its listener's: another listener without
			// users authenticates nobody.
			c.Listen = []Listener{listener("127.0.0.1:1"), listener(":3128")}
			c.Listen[0].Auth, c.Listen[0].URLUser = "basic", &User{Name: "dave", Password: "d"}
		}, []string{"listen[1]"}},
		{"duplicate names", func(c *Config) {
			c.Listen = []Listener{listener("127.0.0.1:1"), listener("127.0.0.1:2")}
			c.Listen[1].Name = c.Listen[0].Name
		}, []string{"listen[1].name"}},
		{"duplicate addresses", func(c *Config) {
			c.Listen = []Listener{listener("127.0.0.1:1"), listener("127.0.0.2:1"), listener("127.0.0.1:1")}
			c.Listen[2].Name = "other"
		}, []string{"listen[2].address"}},
		{"duplicate addresses written differently", func(c *Config) {
			c.Listen = []Listener{listener("[::1]:3128"), listener("[0:0::1]:03128")}
		}, []string{"listen[1].address"}},
		{"port 0 twice", func(c *Config) {
			c.Listen = []Listener{listener("127.0.0.1:0"), listener("127.0.0.1:00")}
		}, nil},

		{"open: all addresses", func(c *Config) { c.Listen = []Listener{listener(":3128")} }, []string{"listen[0]"}},
		{"open: 0.0.0.0", func(c *Config) { c.Listen = []Listener{listener("0.0.0.0:3128")} }, []string{"listen[0]"}},
		{"open: [::]", func(c *Config) { c.Listen = []Listener{listener("[::]:3128")} }, []string{"listen[0]"}},
		{"open: LAN address", func(c *Config) { c.Listen = []Listener{listener("192.168.1.10:3128")} }, []string{"listen[0]"}},
		{"open: host name", func(c *Config) { c.Listen = []Listener{listener("proxy.example:3128")} }, []string{"listen[0]"}},
		{"open: auth none despite users", func(c *Config) {
			c.Auth.Users = []User{alice}
			c.Listen = []Listener{listener(":3128")}
			c.Listen[0].Auth = "none"
		}, []string{"listen[0]"}},
		{"open: socks5 on all addresses", func(c *Config) {
			c.Listen = []Listener{listener(":1080")}
			c.Listen[0].Protocol = "socks5"
		}, []string{"listen[0]"}},
		{"open: mixed on a LAN address", func(c *Config) {
			c.Listen = []Listener{listener("10.0.0.1:3128")}
			c.Listen[0].Protocol = "mixed"
		}, []string{"listen[0]"}},
		{"open: socks5 with users", func(c *Config) {
			c.Auth.Users = []User{alice}
			c.Listen = []Listener{listener("0.0.0.0:1080")}
			c.Listen[0].Protocol = "socks5"
		}, nil},
		{"open: allowed", func(c *Config) {
			c.Listen = []Listener{listener(":3128")}
			c.Listen[0].AllowOpen = true
		}, nil},
		{"open: users make auth basic", func(c *Config) {
			c.Auth.Users = []User{alice}
			c.Listen = []Listener{listener("0.0.0.0:3128")}
		}, nil},
		{"open: explicit basic", func(c *Config) {
			c.Auth.Htpasswd = []string{"/etc/h"}
			c.Listen = []Listener{listener("[::]:3128")}
			c.Listen[0].Auth = "basic"
		}, nil},

		{"every problem reported", func(c *Config) {
			c.Workers = -1
			c.Log.Level = "loud"
			c.Timeouts.Connect.Duration = -time.Second
			c.Auth.Users = []User{{Name: "x"}}
			c.Listen = append(c.Listen, listener("nope"))
		}, []string{"workers", "log.level", "timeouts.connect", "auth.users[0]", "listen[1].address"}},
	}
	durations := map[string]func(c *Config) *Duration{
		"timeouts.read_header":     func(c *Config) *Duration { return &c.Timeouts.ReadHeader },
		"timeouts.connect":         func(c *Config) *Duration { return &c.Timeouts.Connect },
		"timeouts.response_header": func(c *Config) *Duration { return &c.Timeouts.ResponseHeader },
		"timeouts.idle_client":     func(c *Config) *Duration { return &c.Timeouts.IdleClient },
		"timeouts.idle_tunnel":     func(c *Config) *Duration { return &c.Timeouts.IdleTunnel },
		"timeouts.write":           func(c *Config) *Duration { return &c.Timeouts.Write },
		"timeouts.drain":           func(c *Config) *Duration { return &c.Timeouts.Drain },
		"timeouts.udp_idle":        func(c *Config) *Duration { return &c.Timeouts.UDPIdle },
		"upstream.idle_timeout":    func(c *Config) *Duration { return &c.Upstream.IdleTimeout },
		"auth.cache_ttl":           func(c *Config) *Duration { return &c.Auth.CacheTTL },
	}
	for key, field := range durations {
		for _, d := range []time.Duration{0, -time.Second} {
			tests = append(tests, test{key + " " + d.String(), func(c *Config) { field(c).Duration = d }, []string{key}})
		}
	}

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(c)
			err := c.Validate()
			if diff := cmp.Diff(tt.want, errorKeys(t, err)); diff != "" {
				t.Errorf("Validate() = %v\nerror keys (-want +got):\n%s", err, diff)
			}
			if strings.HasPrefix(tt.name, "open:") && tt.want != nil && !errors.Is(err, ErrOpenProxy) {
				t.Errorf("errors.Is(%v, ErrOpenProxy) = false", err)
			}
		})
	}
}

func TestValidateMessages(t *testing.T) {
	c := Default()
	c.Auth.Users = []User{{Name: "a", Bcrypt: "$2y$10$tooshort-secret"}}
	c.Listen = []Listener{listener("0.0.0.0:3128"), listener("::1:3128")}
	c.Listen[0].Auth = "none"
	want := []string{
		`config: auth.users[0].bcrypt: not a bcrypt hash: crypto/bcrypt: hashedSecret too short to be a bcrypted password`,
		`config: listen[0]: open proxy refused: "0.0.0.0:3128" is not a loopback address and its auth is "none"; configure users, or set allow_open = true`,
		`config: listen[1].address: "::1:3128" is not host:port (an IPv6 host is bracketed, as in "[::1]:3128"): too many colons in address`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
}

func TestValidateNamesFileAndLine(t *testing.T) {
	src := "workers = 1\n\n[[listen]]\naddress = \"127.0.0.1:0\"\n\n[[listen]]\naddress = \"127.0.0.1:1\"\nprotocol = \"gopher\"\n\n[log]\nlevel = \"loud\"\n"
	c, err := Parse([]byte(src), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := errorStrings(t, c.Validate())
	want := []string{
		`r.toml:11: log.level: "loud" is not one of debug, info, warn, error`,
		`r.toml:8: listen[1].protocol: "gopher" is not one of ` + strings.Join(protocols, ", "),
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("Validate errors %q lack %q", got, w)
		}
	}
	// A configuration not read from a file has no position to give.
	d := Default()
	d.Log.Level = "loud"
	if got := errorStrings(t, d.Validate()); len(got) != 1 || !strings.HasPrefix(got[0], "config: log.level") {
		t.Errorf("Default().Validate() = %q, want a config: prefix", got)
	}
}

// TestAccessLogTemplate checks that a template alone makes the format
// "template", and that a template's unknown field is refused with the
// file, line and key, naming the field and the known ones.
func TestAccessLogTemplate(t *testing.T) {
	const listen = "[[listen]]\naddress = \"127.0.0.1:0\"\n"
	c, err := Parse([]byte("[access_log]\nenabled = true\ntemplate = \"{squid} {upstream} {source}\"\n"+listen), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	if c.AccessLog.Format != "template" {
		t.Errorf("a template alone: format %q, want template", c.AccessLog.Format)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	c, err = Parse([]byte("[access_log]\nenabled = true\n\ntemplate = \"{time} {client} {usr}\"\n"+listen), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	got := errorStrings(t, c.Validate())
	want := `t.toml:4: access_log.template: unknown field {usr} at byte 16; the fields are time, time_unix, `
	if len(got) != 1 || !strings.HasPrefix(got[0], want) || !strings.Contains(got[0], "user") {
		t.Errorf("Validate errors %q, want one starting %q", got, want)
	}
	c, err = Parse([]byte("[access_log]\nformat = \"combined\"\ntemplate = \"{time}\"\n"+listen), "t.toml")
	if err != nil {
		t.Fatal(err)
	}
	got = errorStrings(t, c.Validate())
	if want := `t.toml:3: access_log.template: is only for format = "template", not "combined"`; len(got) != 1 || got[0] != want {
		t.Errorf("Validate errors %q, want %q", got, want)
	}
}

// TestListenerUsersFileAndLine checks that the errors about a
// listener's users name the file and line, Validate's and those that
// KeyError makes for a user only the server can find missing.
func TestListenerUsersFileAndLine(t *testing.T) {
	src := lines(
		`[[auth.users]]`,
		`name = "alice"`,
		`password = "a"`,
		``,
		`[[listen]]`,
		`address = "127.0.0.1:1"`,
		`users = ["alice",`,
		`  "alice"]`,
		``,
		`[[listen]]`,
		`address = "127.0.0.1:2"`,
		`auth = "none"`,
		`users = ["alice"]`,
	)
	c, err := Parse([]byte(src), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`r.toml:8: listen[0].users[1]: "alice" is also listen[0].users[0]`,
		`r.toml:13: listen[1].users: is for a listener that authenticates, and its auth is "none"`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
	e := c.KeyError("listen[0].users[1]", errors.New(`user "alice" is not there`))
	if got, want := e.Error(), `r.toml:8: listen[0].users[1]: user "alice" is not there`; got != want {
		t.Errorf("KeyError = %q, want %q", got, want)
	}
	if got, want := Default().KeyError("listen[0].users[0]", errors.New("x")).Error(), "config: listen[0].users[0]: x"; got != want {
		t.Errorf("KeyError of a configuration without a file = %q, want %q", got, want)
	}
}

func TestValidateTLS(t *testing.T) {
	tests := []struct {
		name string
		l    Listener
		want []string // keys of the errors
	}{
		{"https with a pair", Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c", Key: "k"}}, nil},
		{"https without a pair", Listener{Address: "127.0.0.1:8443", Protocol: "https"}, []string{"listen[0].tls.cert", "listen[0].tls.key"}},
		{"tls on http", Listener{Address: "127.0.0.1:3128", Protocol: "http", TLS: ListenerTLS{Cert: "c", Key: "k"}}, []string{"listen[0].tls"}},
		{"ktls on socks5", Listener{Address: "127.0.0.1:1080", Protocol: "socks5", TLS: ListenerTLS{KTLS: true}}, []string{"listen[0].tls"}},
		{"alpn http/1.1", httpsALPN("http/1.1"), nil},
		{"alpn h2", httpsALPN("h2"), nil},
		{"alpn both, http/1.1 first", httpsALPN("http/1.1", "h2"), nil},
		{"alpn empty", httpsALPN(), []string{"listen[0].alpn"}},
		{"alpn unknown", httpsALPN("h2", "h3", "spdy/3"), []string{"listen[0].alpn[1]", "listen[0].alpn[2]"}},
		{"alpn twice", httpsALPN("h2", "http/1.1", "h2"), []string{"listen[0].alpn[2]"}},
		{"alpn on http", Listener{Address: "127.0.0.1:3128", Protocol: "http", ALPN: []string{"http/1.1"}}, []string{"listen[0].alpn"}},
		{"alpn on mixed", Listener{Address: "127.0.0.1:3128", Protocol: "mixed", ALPN: []string{"h2"}}, []string{"listen[0].alpn"}},
		{"proxy_protocol_from", Listener{Address: "127.0.0.1:3128", ProxyProtocol: true,
			ProxyProtocolFrom: []string{"10.0.0.0/8", "127.0.0.1", "::1", "[fd00::1]", "2001:db8::/32", "::ffff:192.0.2.0/120"}}, nil},
		{"proxy_protocol_from without proxy_protocol", Listener{Address: "127.0.0.1:3128", ProxyProtocolFrom: []string{"10.0.0.0/8"}},
			[]string{"listen[0].proxy_protocol_from"}},
		{"proxy_protocol_from empty", Listener{Address: "127.0.0.1:3128", ProxyProtocol: true, ProxyProtocolFrom: []string{}},
			[]string{"listen[0].proxy_protocol_from"}},
		{"proxy_protocol_from bad entries", Listener{Address: "127.0.0.1:3128", ProxyProtocol: true,
			ProxyProtocolFrom: []string{"10.0.0.0/8", "10.0.0.0/33", "lb.example.com", ""}},
			[]string{"listen[0].proxy_protocol_from[1]", "listen[0].proxy_protocol_from[2]", "listen[0].proxy_protocol_from[3]"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{Listen: []Listener{tt.l}}
			c.SetDefaults()
			var got []string
			if err := c.Validate(); err != nil {
				got = errorKeys(t, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Validate error keys (-want +got):\n%s", diff)
			}
		})
	}
}

// httpsALPN returns an https listener whose alpn key lists protos.
func httpsALPN(protos ...string) Listener {
	return Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c", Key: "k"}, ALPN: append([]string{}, protos...)}
}

// TestValidateALPNMessages checks that alpn errors name the key, its
// line, and what is wrong.
func TestValidateALPNMessages(t *testing.T) {
	src := "[[listen]]\naddress = \"127.0.0.1:8443\"\nprotocol = \"https\"\ntls = { cert = \"c\", key = \"k\" }\n" +
		"alpn = [\"h2\", \"http/1.0\", \"h2\"]\n\n" +
		"[[listen]]\naddress = \"127.0.0.1:3128\"\nalpn = [\"http/1.1\"]\n\n" +
		"[[listen]]\naddress = \"127.0.0.1:8444\"\nprotocol = \"https\"\ntls = { cert = \"c\", key = \"k\" }\nalpn = []\n"
	c, err := Parse([]byte(src), "a.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`a.toml:5: listen[0].alpn[1]: "http/1.0" is neither "h2" nor "http/1.1"`,
		`a.toml:5: listen[0].alpn[2]: "h2" is listed twice`,
		`a.toml:9: listen[1].alpn: is only for https listeners, not "http"`,
		`a.toml:15: listen[2].alpn: is empty: list "h2", "http/1.1" or both, or leave the key out for both`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
}

// TestValidateProxyProtocolFromMessages checks that proxy_protocol_from
// errors name the key, its line, and what is wrong.
func TestValidateProxyProtocolFromMessages(t *testing.T) {
	src := "[[listen]]\naddress = \"127.0.0.1:3128\"\nproxy_protocol = true\n" +
		"proxy_protocol_from = [\"10.0.0.0/8\",\n  \"10.1.2.3/40\"]\n\n" +
		"[[listen]]\naddress = \"127.0.0.1:3129\"\nproxy_protocol_from = [\"127.0.0.1\"]\n\n" +
		"[[listen]]\naddress = \"127.0.0.1:3130\"\nproxy_protocol = true\nproxy_protocol_from = []\n"
	c, err := Parse([]byte(src), "p.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`p.toml:5: listen[0].proxy_protocol_from[1]: "10.1.2.3/40" is not an IP address or CIDR prefix`,
		`p.toml:9: listen[1].proxy_protocol_from: is only for listeners with proxy_protocol = true`,
		`p.toml:14: listen[2].proxy_protocol_from: is empty: list the balancers' addresses, or leave the key out to take the header from every peer`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
}

func TestLoadResolvesTLSPaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "r.toml")
	src := "[[listen]]\naddress = \"127.0.0.1:8443\"\nprotocol = \"https\"\ntls = { cert = \"s.pem\", key = \"/abs/s.key\", client_ca = \"ca/ca.pem\" }\n"
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := ListenerTLS{Cert: filepath.Join(dir, "s.pem"), Key: "/abs/s.key", ClientCA: filepath.Join(dir, "ca/ca.pem")}
	if diff := cmp.Diff(want, c.Listen[0].TLS); diff != "" {
		t.Errorf("TLS paths (-want +got):\n%s", diff)
	}
}

func TestValidateACLAndLimits(t *testing.T) {
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"allow_private", func(c *Config) { c.AllowPrivate = []string{"127.0.0.1/32", "::1", "ten"} }, []string{"allow_private[2]"}},
		{"good rules", func(c *Config) {
			c.ACL.Groups = map[string][]string{"admins": {"alice"}}
			c.ACL.Rules = []ACLRule{
				{Name: "a", Action: "allow", Criteria: Criteria{Who: Who{Groups: []string{"admins"}}}, AllowPrivate: []string{"10.0.0.0/8"}},
				{Name: "b", Action: "deny", Criteria: Criteria{Clients: []string{"192.0.2.0/24"}, Hosts: []string{"*.example.com", ".example.org", "10.0.0.0/8", "::1"},
					Ports: []string{"25", "8000-8999"}, Methods: []string{"GET"}, Protocols: []string{"http", "socks5-udp"}, Who: Who{Users: []string{"bob"}}}},
			}
		}, nil},
		{"bad rules", func(c *Config) {
			c.ACL.Default = "maybe"
			c.ACL.Groups = map[string][]string{"ad mins": {"alice"}, "ok": {"a:b"}}
			c.ACL.Rules = []ACLRule{
				{Name: "a", Action: "permit"},
				{Name: "a", Action: "deny", AllowPrivate: []string{"10.0.0.0/8"}},
				{Name: "c", Criteria: Criteria{Clients: []string{"300.0.0.1"}, Who: Who{Users: []string{""}, Groups: []string{"nobody"}}, Hosts: []string{"a b"},
					Ports: []string{"0", "1-2-3"}, Methods: []string{"G T"}, Protocols: []string{"gopher"}}, AllowPrivate: []string{"x"}},
			}
		}, []string{
			"acl.default", "acl.groups", "acl.groups.ok[0]",
			"acl.rules[0].action",
			"acl.rules[1].name", "acl.rules[1].allow_private",
			"acl.rules[2]", "acl.rules[2].clients[0]", "acl.rules[2].users[0]", "acl.rules[2].groups[0]", "acl.rules[2].hosts[0]",
			"acl.rules[2].ports[0]", "acl.rules[2].ports[1]", "acl.rules[2].methods[0]", "acl.rules[2].protocols[0]", "acl.rules[2].allow_private[0]",
		}},
		{"limits", func(c *Config) {
			c.Limits = Limits{MaxConnections: -2, MaxConnectionsPerClient: -1, MaxConnectionsPerUser: -1, ConnectionRate: -1,
				ConnectionBurst: -1, MaxTLSHandshakes: -1, AuthFailures: -2, AuthFailuresPerAddress: -2, AuthFailureWindow: Duration{-1},
				AuthCooldown: Duration{-1}, UserBytesPerSecond: -1, UserBytesBurst: -1}
		}, []string{"limits.max_connections", "limits.max_connections_per_client", "limits.max_connections_per_user",
			"limits.connection_rate", "limits.connection_burst", "limits.max_tls_handshakes", "limits.auth_failures",
			"limits.auth_failures_per_address", "limits.auth_failure_window", "limits.auth_cooldown", "limits.user_bytes_per_second", "limits.user_bytes_burst"}},
		{"limits off", func(c *Config) { c.Limits.MaxConnections, c.Limits.AuthFailures = -1, -1 }, nil},
		{"audit and lists", func(c *Config) {
			c.ACL.Mode = "audit"
			c.Listen[0].ACLMode = "enforce"
			c.Lists = Lists{AllowPrivate: []string{"10.0.0.0/8"}}
			c.ACL.Rules = []ACLRule{
				{Name: "r", Action: "report", Criteria: Criteria{HostsFile: "/etc/rustle/ads.txt", ClientsFile: "clients.txt",
					HostsURL: "https://lists.example/ads.txt#sha256=" + strings.Repeat("ab", 32), ClientsURL: "http://10.0.0.1/c.txt?k=v"}},
			}
			c.Routes = []Route{{Name: "listed", Criteria: Criteria{HostsURL: "https://lists.example/cdn.txt"}, Via: Strings{"direct"}}}
		}, nil},
		{"bad audit and lists", func(c *Config) {
			c.ACL.Mode = "observe"
			c.Listen[0].ACLMode = "dry-run"
			c.Lists = Lists{Refresh: Duration{-1}, Timeout: Duration{-1}, MaxBytes: -1, AllowPrivate: []string{"ten"}}
			c.ACL.Rules = []ACLRule{
				{Name: "r", Action: "report", AllowPrivate: []string{"10.0.0.0/8"}, Criteria: Criteria{HostsFile: "a\x00b",
					HostsURL: "ftp://lists.example/a", ClientsURL: "https://u:p@lists.example/a"}},
				{Name: "s", Action: "deny", Criteria: Criteria{HostsURL: "https://lists.example/a#sha256=00"}},
			}
			c.Routes = []Route{{Name: "listed", Criteria: Criteria{ClientsURL: "lists.example/c.txt"}, Via: Strings{"direct"}}}
		}, []string{
			"listen[0].acl_mode", "acl.mode", "acl.rules[0].allow_private", "acl.rules[0].hosts_file", "acl.rules[0].hosts_url",
			"acl.rules[0].clients_url", "acl.rules[1].hosts_url", "lists.refresh", "lists.timeout", "lists.max_bytes",
			"lists.allow_private[0]", "routes[0].clients_url",
		}},
		{"good sni", func(c *Config) {
			c.Listen[0].SNI = "match"
			c.ACL.Rules = []ACLRule{
				{Name: "log-only", Action: "allow", Criteria: Criteria{SNIHosts: []string{"*.cdn.example", ".ok.example", "a.example"}}, SNI: "log"},
				{Name: "no-fronting", Action: "deny", Criteria: Criteria{SNIHosts: []string{"blocked.example"}}},
			}
			c.Routes = []Route{{Name: "r", Criteria: Criteria{SNIHosts: []string{"x.example"}}, Via: Strings{"direct"}}}
			c.Egress.Rules = []EgressRule{{Who: Who{Users: []string{"alice"}}, Bind: []string{"127.0.0.1"}, SNIHosts: []string{"y.example"}}}
		}, nil},
		{"bad sni", func(c *Config) {
			c.Listen[0].SNI = "on"
			c.ACL.Rules = []ACLRule{
				{Name: "a", Action: "allow", Criteria: Criteria{SNIHosts: []string{"192.0.2.1", "10.0.0.0/8", "a b"}}, SNI: "strict"},
				{Name: "b", Action: "deny", SNI: "match"},
			}
			c.Routes = []Route{{Name: "r", Criteria: Criteria{SNIHosts: []string{"::1"}}, Via: Strings{"direct"}}}
			c.Egress.Rules = []EgressRule{{Who: Who{Users: []string{"alice"}}, Bind: []string{"127.0.0.1"}, SNIHosts: []string{"198.51.100.0/24"}}}
		}, []string{
			"listen[0].sni",
			"acl.rules[0].sni_hosts[0]", "acl.rules[0].sni_hosts[1]", "acl.rules[0].sni_hosts[2]", "acl.rules[0].sni",
			"acl.rules[1].sni",
			"egress.rules[0].sni_hosts[0]",
			"routes[0].sni_hosts[0]",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(c)
			c.SetDefaults()
			if diff := cmp.Diff(tt.want, errorKeys(t, c.Validate())); diff != "" {
				t.Errorf("Validate error keys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestACLFileAndLine checks that rules and groups parse from TOML and that
// Validate's errors point at the offending entry's line.
func TestACLFileAndLine(t *testing.T) {
	src := `allow_private = ["127.0.0.1/32"]

[acl.groups]
admins = ["alice", "bob"]

[[acl.rules]]
name = "admins"
action = "allow"
groups = ["admins"]

[[acl.rules]]
action = "deny"
hosts = [
  "example.com",
  "bad host",
]

[[listen]]
address = "127.0.0.1:0"
`
	c, err := Parse([]byte(src), "acl.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := ACL{Default: "deny", Mode: "enforce", Groups: map[string][]string{"admins": {"alice", "bob"}}, Rules: []ACLRule{
		{Name: "admins", Action: "allow", Criteria: Criteria{Who: Who{Groups: []string{"admins"}}}},
		{Name: "rules[1]", Action: "deny", Criteria: Criteria{Hosts: []string{"example.com", "bad host"}}},
	}}
	if diff := cmp.Diff(want, c.ACL); diff != "" {
		t.Errorf("ACL (-want +got):\n%s", diff)
	}
	got := errorStrings(t, c.Validate())
	if len(got) != 1 || !strings.HasPrefix(got[0], `acl.toml:15: acl.rules[1].hosts[1]: "bad host"`) {
		t.Errorf("Validate = %q, want one error at acl.toml:15", got)
	}
	if _, err := Parse([]byte("[acl]\ngroups = 3\n"), "g.toml"); err == nil || !strings.Contains(err.Error(), "g.toml:2") {
		t.Errorf("groups = 3: %v", err)
	}
	if _, err := Parse([]byte("[acl.groups]\nadmins = \"alice\"\n"), "g.toml"); err == nil || !strings.Contains(err.Error(), "g.toml:2") {
		t.Errorf("admins = \"alice\": %v", err)
	}
}

func TestConnectionLimit(t *testing.T) {
	for _, tt := range []struct {
		max    int
		nofile uint64
		want   int
	}{
		{0, 20000, 9624}, {0, 1024, 432}, {0, 100, 64}, {0, 1 << 62, (1<<40 - 128 - 1<<35) / 2}, {500, 20000, 500}, {-1, 20000, 0},
		{536, 1200, 518}, // lowered to what the descriptors allow
	} {
		if got := (Limits{MaxConnections: tt.max}).ConnectionLimit(tt.nofile); got != tt.want {
			t.Errorf("ConnectionLimit(max %d, nofile %d) = %d, want %d", tt.max, tt.nofile, got, tt.want)
		}
	}
}

// TestDescriptorBudget checks that connections and splice pipes share the
// open-file limit: together, with the 128 kept back, they never need more
// descriptors than nofile, except at the floors (64 connections, 16 pipes);
// that an idle tunnel costs only its two sockets (connections are about
// (nofile - a small reserve) / 2, the pipes a bounded pool of nofile/64);
// and that a max_connections the descriptors cannot hold is lowered.
func TestDescriptorBudget(t *testing.T) {
	tests := []struct {
		name             string
		max              int
		nofile           uint64
		wantConns, pipes int
	}{
		{"derived, 1024", 0, 1024, 432, 16},
		{"derived, 1200", 0, 1200, 518, 18},
		// The campaign's limit: 9,000 idle tunnels fit.
		{"derived, 20000", 0, 20000, 9624, 312},
		{"derived, 65536", 0, 65536, 31680, 1024},
		{"derived, floors", 0, 100, 64, 16},
		{"derived, clamped", 0, 1 << 62, (1<<40 - 128 - 1<<35) / 2, 1 << 34},
		{"explicit, pipes get the rest", 500, 20000, 500, 9436},
		{"explicit, lowered to what fits", 500, 1024, 432, 16},
		// Issue 27: 536 connections and the pipes' 36 descriptors need more than 1,200.
		{"explicit, lowered at 1200", 536, 1200, 518, 18},
		{"explicit, fits exactly", 518, 1200, 518, 18},
		{"no limit, the pool for pipes", -1, 20000, 0, 312},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conns, pipes := (Limits{MaxConnections: tt.max}).DescriptorBudget(tt.nofile)
			if conns != tt.wantConns || pipes != tt.pipes {
				t.Errorf("DescriptorBudget(max %d, nofile %d) = %d connections, %d pipes; want %d, %d",
					tt.max, tt.nofile, conns, pipes, tt.wantConns, tt.pipes)
			}
			if tt.max >= 0 && conns > 64 && pipes > 16 && uint64(128+2*conns+2*pipes) > tt.nofile {
				t.Errorf("%d connections and %d pipes need %d descriptors, over the limit %d",
					conns, pipes, 128+2*conns+2*pipes, tt.nofile)
			}
		})
	}
}

// TestValidateQuota checks the [quota] and [cluster] keys, and that a
// malformed Redis URL's error does not show its password.
func TestValidateQuota(t *testing.T) {
	c := Default()
	c.ACL.Groups = map[string][]string{"ci": {"bob"}}
	c.Quota.Rules = []QuotaRule{
		{Name: "ok", Who: Who{Groups: []string{"ci"}}, Bytes: 1},
		{Name: "ok", Period: "week", Reset: "24:00", TimeZone: "Mars/Olympus", Who: Who{Groups: []string{"nobody"}}},
	}
	c.Cluster.Redis = "redis://user:s3cret@[::1:6379"
	c.SetDefaults()
	err := c.Validate()
	if err == nil {
		t.Fatal("Validate accepted the rules")
	}
	for _, key := range []string{"quota.rules[1].name", "quota.rules[1].period", "quota.rules[1].reset",
		"quota.rules[1].time_zone", "quota.rules[1].groups[0]", "quota.rules[1]", "cluster.redis"} {
		if !strings.Contains(err.Error(), key+":") {
			t.Errorf("no error for %s in\n%v", key, err)
		}
	}
	if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "quota.rules[0]") {
		t.Errorf("error shows the password or refuses the good rule:\n%v", err)
	}
}

// TestValidateCluster checks the [cluster] keys: one Redis of three
// kinds, the keys each kind takes, the addresses of Sentinels and nodes.
func TestValidateCluster(t *testing.T) {
	for _, tt := range []struct {
		name string
		set  func(c *Cluster)
		key  string // "" = valid
	}{
		{"none", func(c *Cluster) {}, ""},
		{"one server", func(c *Cluster) { c.Redis = "redis://:pw@127.0.0.1:6379/0" }, ""},
		{"one server, password from a file", func(c *Cluster) {
			c.Redis, c.Username, c.PasswordFile = "redis://127.0.0.1:6379/0", "rustle", "/etc/rustle/redis.pw"
		}, ""},
		{"sentinels", func(c *Cluster) {
			c.Sentinels, c.MasterName = []string{"10.0.0.1:26379", "[2001:db8::1]:26379", "s3.example:26379"}, "rustle"
			c.Username, c.PasswordFile, c.SentinelPasswordFile = "rustle", "redis.pw", "sentinel.pw"
		}, ""},
		{"nodes", func(c *Cluster) { c.Nodes, c.PasswordFile = []string{"10.0.0.1:7000", "10.0.0.2:7000"}, "redis.pw" }, ""},
		{"redis and sentinels", func(c *Cluster) {
			c.Redis, c.Sentinels, c.MasterName = "redis://127.0.0.1:6379", []string{"127.0.0.1:26379"}, "m"
		}, "cluster.sentinels"},
		{"sentinels and nodes", func(c *Cluster) {
			c.Sentinels, c.MasterName, c.Nodes = []string{"127.0.0.1:26379"}, "m", []string{"127.0.0.1:7000"}
		}, "cluster.nodes"},
		{"sentinels without a master name", func(c *Cluster) { c.Sentinels = []string{"127.0.0.1:26379"} }, "cluster.master_name"},
		{"master name without sentinels", func(c *Cluster) { c.Nodes, c.MasterName = []string{"127.0.0.1:7000"}, "m" }, "cluster.master_name"},
		{"sentinel password without sentinels", func(c *Cluster) {
			c.Redis, c.SentinelPasswordFile = "redis://127.0.0.1:6379", "s.pw"
		}, "cluster.sentinel_password_file"},
		{"sentinel without a port", func(c *Cluster) {
			c.Sentinels, c.MasterName = []string{"127.0.0.1"}, "m"
		}, "cluster.sentinels[0]"},
		{"node with a bad port", func(c *Cluster) { c.Nodes = []string{"127.0.0.1:7000", "127.0.0.1:70000"} }, "cluster.nodes[1]"},
		{"node listed twice", func(c *Cluster) { c.Nodes = []string{"127.0.0.1:7000", "127.0.0.1:7000"} }, "cluster.nodes[1]"},
		{"password in the URL and a file", func(c *Cluster) {
			c.Redis, c.PasswordFile = "redis://:pw@127.0.0.1:6379", "redis.pw"
		}, "cluster.password_file"},
		{"user in the URL and a username", func(c *Cluster) {
			c.Redis, c.Username = "redis://u:pw@127.0.0.1:6379", "v"
		}, "cluster.username"},
		{"username without a password", func(c *Cluster) {
			c.Nodes, c.Username = []string{"127.0.0.1:7000"}, "rustle"
		}, "cluster.username"},
		{"username without a password, with a URL", func(c *Cluster) {
			c.Redis, c.Username = "redis://127.0.0.1:6379", "rustle"
		}, "cluster.username"},
		{"credentials without Redis", func(c *Cluster) { c.PasswordFile = "redis.pw" }, "cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.set(&c.Cluster)
			c.SetDefaults()
			err := c.Validate()
			switch {
			case tt.key == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.key != "" && err == nil:
				t.Errorf("Validate accepted it; want an error for %s", tt.key)
			case tt.key != "" && !strings.Contains(err.Error(), tt.key+":"):
				t.Errorf("Validate: %v; want an error for %s", err, tt.key)
			}
			if err != nil && strings.Contains(err.Error(), "pw@") {
				t.Errorf("error shows a password: %v", err)
			}
		})
	}
}

// TestOpenFilesFor checks that OpenFilesFor is the smallest open-file
// limit whose budget holds the connections asked for.
func TestOpenFilesFor(t *testing.T) {
	for _, conns := range []int{1, 64, 65, 100, 518, 519, 536, 9000, 31680, 1 << 30} {
		n := OpenFilesFor(conns)
		if got := (Limits{}).ConnectionLimit(n); got < conns {
			t.Errorf("OpenFilesFor(%d) = %d, which holds %d connections", conns, n, got)
		}
		if got := (Limits{}).ConnectionLimit(n - 1); got >= conns && got > minDerivedConns {
			t.Errorf("OpenFilesFor(%d) = %d, but %d holds %d connections", conns, n, n-1, got)
		}
	}
	if n := OpenFilesFor(536); n != 1238 {
		t.Errorf("OpenFilesFor(536) = %d, want 1238", n)
	}
}

// TestListKeys checks the list keys of rules and routes: Load resolves a
// relative hosts_file or clients_file against the file's directory,
// Validate's errors name a bad URL's key and line without repeating a
// password, and AuditLines says which rules are in audit mode.
func TestListKeys(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rustle.toml")
	src := lines(
		`[acl]`,
		`mode = "audit"`,
		`[[acl.rules]]`,
		`name = "ads"`,
		`action = "report"`,
		`hosts_file = "lists/ads.txt"`,
		`clients_file = "/etc/rustle/office.txt"`,
		`[[acl.rules]]`,
		`name = "vendor"`,
		`action = "allow"`,
		`hosts_url = "https://user:hunter2@lists.example/vendor.txt"`,
		`[[routes]]`,
		`name = "cdn"`,
		`hosts_file = "cdn.txt"`,
		`via = "direct"`,
		`[[listen]]`,
		`name = "ci"`,
		`address = "127.0.0.1:3128"`,
		`acl_mode = "enforce"`,
	)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.ACL.Rules[0].HostsFile; got != filepath.Join(dir, "lists/ads.txt") {
		t.Errorf("hosts_file = %q, not resolved", got)
	}
	if got := c.ACL.Rules[0].ClientsFile; got != "/etc/rustle/office.txt" {
		t.Errorf("clients_file = %q, an absolute path changed", got)
	}
	if got := c.Routes[0].HostsFile; got != filepath.Join(dir, "cdn.txt") {
		t.Errorf("a route's hosts_file = %q, not resolved", got)
	}
	errs := errorStrings(t, c.Validate())
	want := path + `:11: acl.rules[1].hosts_url: https://lists.example/vendor.txt: a list URL takes no user and password`
	if len(errs) != 1 || errs[0] != want || strings.Contains(errs[0], "hunter2") {
		t.Errorf("Validate = %q, want %q", errs, want)
	}
	lines := c.AuditLines()
	if len(lines) != 3 || !strings.HasPrefix(lines[0], `acl.mode = "audit"`) || !strings.HasPrefix(lines[1], `acl.rules[0] "ads": action = "report"`) ||
		!strings.HasPrefix(lines[2], `listen[0] "ci": acl_mode = "enforce"`) {
		t.Errorf("AuditLines = %q", lines)
	}
	if c.ListenerAudits(c.Listen[0]) {
		t.Error("listener ci audits")
	}
	c.ACL.Mode = "enforce"
	c.Listen[0].ACLMode = "audit"
	if lines := c.AuditLines(); len(lines) != 2 || !strings.HasPrefix(lines[1], `listen[0] "ci": acl_mode = "audit"`) || !c.ListenerAudits(c.Listen[0]) {
		t.Errorf("AuditLines = %q", lines)
	}
}
