package httpproxy

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/gate"
	"github.com/rustle-proxy/rustle/internal/http1"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

type wantTarget struct {
	authority, host string
	port            int
	ipv6            bool
	path            string
}

// statusOf returns the status a client is answered for err: 0 for nil,
// the ParseError's status, or -1 for an error of another type.
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	var pe *http1.ParseError
	if errors.As(err, &pe) {
		return pe.Status
	}
	return -1
}

func gotTarget(t *target) wantTarget {
	return wantTarget{string(t.authority), string(t.host), t.port, t.ipv6, string(t.path)}
}

func TestParseAbsoluteTarget(t *testing.T) {
	tests := []struct {
		in      string
		wantErr error
		want    wantTarget
	}{
		{"http://host", nil, wantTarget{"host", "host", 80, false, "/"}},
		{"http://host/", nil, wantTarget{"host", "host", 80, false, "/"}},
		{"http://host:8080/p?q", nil, wantTarget{"host:8080", "host", 8080, false, "/p?q"}},
		{"http://Example.COM/A/b", nil, wantTarget{"Example.COM", "Example.COM", 80, false, "/A/b"}},
		{"HTTP://host/", nil, wantTarget{"host", "host", 80, false, "/"}},
		{"hTtP://host/", nil, wantTarget{"host", "host", 80, false, "/"}},
		{"http://[::1]:8080/", nil, wantTarget{"[::1]:8080", "::1", 8080, true, "/"}},
		{"http://[::1]", nil, wantTarget{"[::1]", "::1", 80, true, "/"}},
		{"http://[2001:DB8::1]/x", nil, wantTarget{"[2001:DB8::1]", "2001:DB8::1", 80, true, "/x"}},
		{"http://[::ffff:192.0.2.1]:81/", nil, wantTarget{"[::ffff:192.0.2.1]:81", "::ffff:192.0.2.1", 81, true, "/"}},
		{"http://127.0.0.1:1/", nil, wantTarget{"127.0.0.1:1", "127.0.0.1", 1, false, "/"}},
		{"http://h:65535", nil, wantTarget{"h:65535", "h", 65535, false, "/"}},
		{"http://h:080/", nil, wantTarget{"h:080", "h", 80, false, "/"}},
		{"http://my_host-1.example/", nil, wantTarget{"my_host-1.example", "my_host-1.example", 80, false, "/"}},
		// The origin-form of "http://h?q" is "/?q": the forwarder adds
		// the slash.
		{"http://h?q", nil, wantTarget{"h", "h", 80, false, "?q"}},
		{"http://h:81?q=1&r=/x", nil, wantTarget{"h:81", "h", 81, false, "?q=1&r=/x"}},
		{"http://h/@evil", nil, wantTarget{"h", "h", 80, false, "/@evil"}},
		{"http://h/a%20b//c", nil, wantTarget{"h", "h", 80, false, "/a%20b//c"}},

		{"/", errOriginForm, wantTarget{}},
		{"/index.html", errOriginForm, wantTarget{}},
		{"*", errOriginForm, wantTarget{}},
		{"https://host/", errScheme, wantTarget{}},
		{"ftp://host/", errScheme, wantTarget{}},
		{"ws://host/", nil, wantTarget{"host", "host", 80, false, "/"}},
		{"WS://host:8080/chat", nil, wantTarget{"host:8080", "host", 8080, false, "/chat"}},
		{"wss://host/", errScheme, wantTarget{}},
		{"http:/host/", errScheme, wantTarget{}},
		{"http:host", errScheme, wantTarget{}},
		{"http", errScheme, wantTarget{}},
		{"host:80", errScheme, wantTarget{}},
		{"", errScheme, wantTarget{}},
		{"http://user@host/", errUserinfo, wantTarget{}},
		{"http://user:pass@host/", errUserinfo, wantTarget{}},
		{"http://@host/", errUserinfo, wantTarget{}},
		{"http://host@evil:80/", errUserinfo, wantTarget{}},
		{"http://h/#frag", errFragment, wantTarget{}},
		{"http://h#frag", errFragment, wantTarget{}},
		{"http://h/?q#frag", errFragment, wantTarget{}},
		{"http://", errBadAuthority, wantTarget{}},
		{"http:///path", errBadAuthority, wantTarget{}},
		{"http://?q", errBadAuthority, wantTarget{}},
		{"http://h:0/", errBadAuthority, wantTarget{}},
		{"http://h:00000/", errBadAuthority, wantTarget{}},
		{"http://h:65536/", errBadAuthority, wantTarget{}},
		{"http://h:99999/", errBadAuthority, wantTarget{}},
		{"http://h:123456/", errBadAuthority, wantTarget{}},
		{"http://h:http/", errBadAuthority, wantTarget{}},
		{"http://h:8o/", errBadAuthority, wantTarget{}},
		{"http://h:-1/", errBadAuthority, wantTarget{}},
		{"http://h:+80/", errBadAuthority, wantTarget{}},
		{"http://h:/", errBadAuthority, wantTarget{}},
		{"http://h:", errBadAuthority, wantTarget{}},
		{"http://h:80:81/", errBadAuthority, wantTarget{}},
		{"http://:80/", errBadAuthority, wantTarget{}},
		{"http://[::1/", errBadAuthority, wantTarget{}},
		{"http://[::1", errBadAuthority, wantTarget{}},
		{"http://::1/", errBadAuthority, wantTarget{}},
		{"http://[::1]x/", errBadAuthority, wantTarget{}},
		{"http://[::1]:/", errBadAuthority, wantTarget{}},
		{"http://[::1]:0/", errBadAuthority, wantTarget{}},
		{"http://[]/", errBadAuthority, wantTarget{}},
		{"http://[:]/", errBadAuthority, wantTarget{}},
		{"http://[::g]/", errBadAuthority, wantTarget{}},
		{"http://[fe80::1%25eth0]/", errBadAuthority, wantTarget{}},
		{"http://[h]/", errBadAuthority, wantTarget{}},
		{"http://h\\evil/", errBadAuthority, wantTarget{}},
		{"http://h%2f/", errBadAuthority, wantTarget{}},
		{"http://h\x00/", errBadAuthority, wantTarget{}},
		{"http://h\xc3\xa9/", errBadAuthority, wantTarget{}},
		{"http://" + strings.Repeat("a", 254) + "/", errBadAuthority, wantTarget{}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var tg target
			err := parseAbsoluteTarget([]byte(tt.in), &tg)
			if err != tt.wantErr {
				t.Fatalf("parseAbsoluteTarget(%q): %v, want %v", tt.in, err, tt.wantErr)
			}
			if err != nil {
				if statusOf(err) != 400 {
					t.Errorf("status %d, want 400", statusOf(err))
				}
				return
			}
			if got := gotTarget(&tg); got != tt.want {
				t.Errorf("parseAbsoluteTarget(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseAbsoluteTargetLongHost(t *testing.T) {
	host := strings.Repeat("a", 253)
	var tg target
	if err := parseAbsoluteTarget([]byte("http://"+host+":8/"), &tg); err != nil {
		t.Fatalf("253-byte host: %v", err)
	}
	if string(tg.host) != host || tg.port != 8 {
		t.Errorf("host, port = %q, %d", tg.host, tg.port)
	}
}

// TestTargetOriginFormReason checks that a client that mistakes rustle for an
// origin server is told what to send instead.
func TestTargetOriginFormReason(t *testing.T) {
	var tg target
	err := parseAbsoluteTarget([]byte("/"), &tg)
	if err == nil || !strings.Contains(err.Error(), "forward proxy") {
		t.Fatalf("parseAbsoluteTarget(/): %v, want an error naming the forward proxy", err)
	}
	if statusOf(err) != 400 {
		t.Errorf("status %d, want 400", statusOf(err))
	}
}

func TestParseAuthorityForm(t *testing.T) {
	tests := []struct {
		in      string
		wantErr error
		want    wantTarget
	}{
		{"host:443", nil, wantTarget{"host:443", "host", 443, false, ""}},
		{"Example.com:8443", nil, wantTarget{"Example.com:8443", "Example.com", 8443, false, ""}},
		{"[::1]:443", nil, wantTarget{"[::1]:443", "::1", 443, true, ""}},
		{"10.0.0.1:22", nil, wantTarget{"10.0.0.1:22", "10.0.0.1", 22, false, ""}},
		{"host", errBadAuthority, wantTarget{}},
		{"[::1]", errBadAuthority, wantTarget{}},
		{"host:", errBadAuthority, wantTarget{}},
		{"[::1]:", errBadAuthority, wantTarget{}},
		{"host:0", errBadAuthority, wantTarget{}},
		{"host:65536", errBadAuthority, wantTarget{}},
		{"host:https", errBadAuthority, wantTarget{}},
		{":443", errBadAuthority, wantTarget{}},
		{"", errBadAuthority, wantTarget{}},
		{"host:443/", errBadAuthority, wantTarget{}},
		{"host/x:443", errBadAuthority, wantTarget{}},
		{"http://host:443", errBadAuthority, wantTarget{}},
		{"user@host:443", errUserinfo, wantTarget{}},
		{"[::1:443", errBadAuthority, wantTarget{}},
		{"::1:443", errBadAuthority, wantTarget{}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var tg target
			tg.path = []byte("/stale")
			err := parseAuthorityForm([]byte(tt.in), &tg)
			if err != tt.wantErr {
				t.Fatalf("parseAuthorityForm(%q): %v, want %v", tt.in, err, tt.wantErr)
			}
			if err != nil {
				if statusOf(err) != 400 {
					t.Errorf("status %d, want 400", statusOf(err))
				}
				return
			}
			if got := gotTarget(&tg); got != tt.want {
				t.Errorf("parseAuthorityForm(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if tg.path != nil {
				t.Errorf("path = %q, want nil", tg.path)
			}
		})
	}
}

// dialAddress returns what a grant dials (gate.Grant.AppendDest, appended
// to dst) for a request to tg, whose destination the proxy gives
// Authorize as its host and port (see conn.authorize).
func dialAddress(t testing.TB, s *gate.Session, dst []byte, tg *target) []byte {
	t.Helper()
	var g gate.Grant
	r := gate.Request{Protocol: acl.Connect, Method: "CONNECT", Host: string(tg.host), Port: uint16(tg.port)}
	if k := s.Authorize(&r, &g); k != gate.OK {
		t.Fatalf("Authorize(%q) = %v", tg.host, k)
	}
	defer g.Finish(0, 0)
	return g.AppendDest(dst)
}

// newDestSession returns a session of a policy without rules, which
// grants every request: dialAddress's.
func newDestSession(t testing.TB) *gate.Session {
	t.Helper()
	s := proxytest.NewPolicy(t, proxytest.PolicyConfig{}).NewSession(context.Background(), netip.MustParseAddrPort("127.0.0.1:40000"), nil, nil)
	t.Cleanup(s.Close)
	return s
}

// TestTargetDialAddress checks the address a request's target is dialled
// at, which keys the upstream pool: the host in lower case, an IPv6
// literal in brackets.
func TestTargetDialAddress(t *testing.T) {
	s := newDestSession(t)
	tests := []struct {
		in       string
		connect  bool
		dst      string
		wantAddr string
	}{
		{"http://Example.COM/", false, "", "example.com:80"},
		{"http://example.com:8080/x", false, "", "example.com:8080"},
		{"http://[::1]:8080/", false, "", "[::1]:8080"},
		{"http://[FE80::AbCd]/", false, "", "[fe80::abcd]:80"},
		{"WWW.Example.Org:443", true, "", "www.example.org:443"},
		{"[2001:DB8::1]:443", true, "", "[2001:db8::1]:443"},
		{"h:65535", true, "key=", "key=h:65535"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var tg target
			var err error
			if tt.connect {
				err = parseAuthorityForm([]byte(tt.in), &tg)
			} else {
				err = parseAbsoluteTarget([]byte(tt.in), &tg)
			}
			if err != nil {
				t.Fatalf("parse %q: %v", tt.in, err)
			}
			host := string(tg.host)
			got := string(dialAddress(t, s, []byte(tt.dst), &tg))
			if got != tt.wantAddr {
				t.Errorf("dial address = %q, want %q", got, tt.wantAddr)
			}
			if string(tg.host) != host {
				t.Errorf("the dial address changed the target's host to %q", tg.host)
			}
		})
	}
}

func TestTargetAppendInt(t *testing.T) {
	for _, tt := range []struct {
		n    int64
		want string
	}{
		{0, "0"}, {7, "7"}, {10, "10"}, {443, "443"}, {65535, "65535"},
		{9223372036854775807, "9223372036854775807"},
	} {
		if got := string(appendInt([]byte("x"), tt.n)); got != "x"+tt.want {
			t.Errorf("appendInt(%d) = %q, want %q", tt.n, got, "x"+tt.want)
		}
	}
}
