package config

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseListenURL(t *testing.T) {
	tests := []struct {
		in      string
		want    Listener
		wantErr string // substring of the error; "" for success
	}{
		{in: "http://127.0.0.1:8080", want: Listener{Address: "127.0.0.1:8080", Protocol: "http"}},
		{in: "http://:3128", want: Listener{Address: ":3128", Protocol: "http"}},
		{in: "http://[::1]:3128", want: Listener{Address: "[::1]:3128", Protocol: "http"}},
		{in: "HTTP://localhost:3128/", want: Listener{Address: "localhost:3128", Protocol: "http"}},
		{
			in:   "http://user:pass@127.0.0.1:8080",
			want: Listener{Address: "127.0.0.1:8080", Protocol: "http", Auth: "basic", URLUser: &User{Name: "user", Password: "pass"}},
		},
		{
			in:   "http://al%20ice:p%40ss%3Aw0rd%2F@[::1]:3128",
			want: Listener{Address: "[::1]:3128", Protocol: "http", Auth: "basic", URLUser: &User{Name: "al ice", Password: "p@ss:w0rd/"}},
		},
		{in: "http://127.0.0.1", wantErr: "missing port"},
		{in: "http://[::1]", wantErr: "missing port"},
		{in: "http://user:hunter2@127.0.0.1", wantErr: "missing port"},
		{in: "http://::1:3128", wantErr: "invalid port"},
		{in: "socks5://127.0.0.1:1080", want: Listener{Address: "127.0.0.1:1080", Protocol: "socks5"}},
		{
			in:   "socks5://user:pass@127.0.0.1:1080",
			want: Listener{Address: "127.0.0.1:1080", Protocol: "socks5", Auth: "basic", URLUser: &User{Name: "user", Password: "pass"}},
		},
		{
			in:   "mixed://user:pass@127.0.0.1:3128",
			want: Listener{Address: "127.0.0.1:3128", Protocol: "mixed", Auth: "basic", URLUser: &User{Name: "user", Password: "pass"}},
		},
		{in: "mixed://[::1]:3128", want: Listener{Address: "[::1]:3128", Protocol: "mixed"}},
		{in: "socks4://127.0.0.1:1080", wantErr: `scheme "socks4" is not one of http, https, socks5, mixed`},
		{in: "socks5h://127.0.0.1:1080", wantErr: `scheme "socks5h"`},
		{in: "ftp://127.0.0.1:21", wantErr: "scheme"},
		{in: "127.0.0.1:8080", wantErr: "want scheme://"},
		{in: ":8080", wantErr: "want scheme://"},
		{in: "http://127.0.0.1:8080?cert=a.pem", wantErr: "query parameters are only for https://"},
		{in: "http://127.0.0.1:8080?", wantErr: "query parameters are only for https://"},
		{
			in:   "https://u:p@127.0.0.1:8443?cert=server.pem&key=server.key",
			want: Listener{Address: "127.0.0.1:8443", Protocol: "https", Auth: "basic", TLS: ListenerTLS{Cert: "server.pem", Key: "server.key"}, URLUser: &User{Name: "u", Password: "p"}},
		},
		{
			in:   "https://127.0.0.1:8443?cert=c.pem&key=k.pem&client_ca=ca.pem",
			want: Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem", ClientCA: "ca.pem"}},
		},
		{
			in:   "https://127.0.0.1:8443?cert=c.pem&key=k.pem&alpn=http/1.1",
			want: Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem"}, ALPN: []string{"http/1.1"}},
		},
		{
			in:   "https://127.0.0.1:8443?cert=c.pem&key=k.pem&alpn=http%2F1.1,h2",
			want: Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem"}, ALPN: []string{"http/1.1", "h2"}},
		},
		{
			in: "https://u:p@127.0.0.1:8443?cert=c.pem&key=k.pem&http3=1",
			want: Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem"}, HTTP3: true,
				Auth: AuthBasic, URLUser: &User{Name: "u", Password: "p"}},
		},
		{
			in:   "https://127.0.0.1:8443?cert=c.pem&key=k.pem&http3=0",
			want: Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem"}},
		},
		{in: "https://127.0.0.1:8443?cert=c.pem&key=k.pem&http3=yes", wantErr: `http3="yes": want 1 or 0`},
		{in: "http://127.0.0.1:8080?http3=1", wantErr: "query parameters are only for https://"},
		{in: "http://127.0.0.1:8080?alpn=h2", wantErr: "query parameters are only for https:// (cert, key, client_ca, alpn, http3)"},
		{in: "https://127.0.0.1:8443", wantErr: "https:// needs ?cert=FILE&key=FILE"},
		{in: "https://127.0.0.1:8443?cert=c.pem", wantErr: "https:// needs ?cert=FILE&key=FILE"},
		{in: "https://127.0.0.1:8443?cert=c.pem&key=k.pem&ktls=1", wantErr: `unknown query parameter "ktls"`},
		{in: "https://127.0.0.1:8443?cert=a&cert=b&key=k", wantErr: `query parameter "cert" given 2 times`},
		{in: "http://127.0.0.1:8080/path", wantErr: "no path"},
		{in: "http://127.0.0.1:8080#frag", wantErr: "no path or fragment"},
		{in: "http://127.0.0.1:99999", wantErr: "not a number from 0 to 65535"},
		{in: "http://[127.0.0.1]:80", wantErr: "invalid IP-literal"},
		{in: "http://user@127.0.0.1:8080", wantErr: `user "user" has no password`},
		{in: "http://user:@127.0.0.1:8080", wantErr: `user "user" has no password`},
		{in: "http://:hunter2@127.0.0.1:8080", wantErr: "empty user name"},
		{in: "http://a%3Ab:hunter2@127.0.0.1:8080", wantErr: `user name "a:b" contains ':'`},
		{in: "http://user:hunter2@127.0.0.1:8080?x=1", wantErr: "query"},
		{in: "http://user:hunter2 x@127.0.0.1:8080", wantErr: "invalid userinfo"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			l, err := ParseListenURL(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("ParseListenURL = %+v; want an error containing %q", l, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "config: listen URL ") {
					t.Errorf("error %q: want a config: listen URL error containing %q", err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Errorf("error %q repeats the password", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseListenURL: %v", err)
			}
			if diff := cmp.Diff(tt.want, l); diff != "" {
				t.Errorf("listener (-want +got):\n%s", diff)
			}
		})
	}
}

// TestListenURLValidates checks that listeners from -L flags make a
// configuration that validates, once defaults are set: a listener with a
// user of its own authenticates, even on every address, and one without
// authenticates nobody when no users are configured (so it is refused on
// a non-loopback address as an open proxy).
func TestListenURLValidates(t *testing.T) {
	c := &Config{}
	for _, s := range []string{"http://alice:secret@:3128", "http://[::1]:3129", "socks5://bob:secret@:1080", "mixed://127.0.0.1:3130",
		"https://127.0.0.1:8443?cert=c.pem&key=k.pem&alpn=http/1.1", "https://127.0.0.1:8444?cert=c.pem&key=k.pem&alpn=h2,http/1.1"} {
		l, err := ParseListenURL(s)
		if err != nil {
			t.Fatal(err)
		}
		c.Listen = append(c.Listen, l)
	}
	c.SetDefaults()
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	if got := c.Listen[0].Name; got != "http :3128" {
		t.Errorf("default name %q, want %q", got, "http :3128")
	}
	if len(c.Auth.Users) != 0 {
		t.Errorf("users %v: a -L user is its listener's, not one of the configured users", c.Auth.Users)
	}
	for i, want := range []string{AuthBasic, AuthNone, AuthBasic, AuthNone} {
		if got := c.EffectiveAuth(c.Listen[i]); got != want {
			t.Errorf("listener %s: auth %q, want %q", c.Listen[i].Name, got, want)
		}
	}

	open, err := ParseListenURL("http://:3131")
	if err != nil {
		t.Fatal(err)
	}
	c.Listen = append(c.Listen, open)
	c.SetDefaults()
	if err := c.Validate(); !errors.Is(err, ErrOpenProxy) {
		t.Errorf("Validate with -L http://:3131 beside listeners with users: %v, want ErrOpenProxy", err)
	}
}

// FuzzParseListenURL checks that ParseListenURL never panics and that
// what it accepts has a protocol rustle speaks and an address Validate
// accepts.
func FuzzParseListenURL(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8080", "http://u:p%40@[::1]:3128", "http://:3128", "http://x@y:1?z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseListenURL(s)
		if err != nil {
			return
		}
		u := l.URLUser
		if !slices.Contains(protocols, l.Protocol) {
			t.Fatalf("ParseListenURL(%q): protocol %q", s, l.Protocol)
		}
		if _, _, err := splitListenAddress(l.Address); err != nil {
			t.Fatalf("ParseListenURL(%q): address %q: %v", s, l.Address, err)
		}
		if (u != nil) != (l.Auth == AuthBasic) || u != nil && (u.Name == "" || u.Password == "" || strings.Contains(u.Name, ":")) {
			t.Fatalf("ParseListenURL(%q) = %+v, %+v", s, l, u)
		}
	})
}
