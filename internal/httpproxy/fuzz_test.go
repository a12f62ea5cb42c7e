package httpproxy

import (
	"bytes"
	"net/url"
	"strconv"
	"testing"

	"github.com/rustle-proxy/rustle/internal/dialer"
	"github.com/rustle-proxy/rustle/internal/gate"
)

func FuzzTarget(f *testing.F) {
	f.Add([]byte("http://example.com:8080/p?q"))
	s := newDestSession(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		var tg target
		if err := parseAbsoluteTarget(data, &tg); err == nil {
			checkTarget(t, s, &tg)
			if len(tg.path) == 0 || tg.path[0] != '/' && tg.path[0] != '?' {
				t.Fatalf("path %q", tg.path)
			}
			if bytes.IndexByte(tg.path, '#') >= 0 {
				t.Fatalf("fragment in path %q", tg.path)
			}
			rest := data[len("ws://"):] // ws:// URLs are WebSocket handshakes
			if bytes.HasPrefix(bytes.ToLower(data), []byte("http://")) {
				rest = data[len("http://"):]
			}
			if !bytes.Equal(rest, append(append([]byte{}, tg.authority...), tg.path...)) &&
				!(string(tg.path) == "/" && bytes.Equal(rest, tg.authority)) {
				t.Fatalf("authority %q and path %q are not the target %q", tg.authority, tg.path, data)
			}
			if u, err := url.Parse(string(data)); err == nil {
				port := u.Port()
				if port == "" {
					port = "80"
				}
				if p, _ := strconv.Atoi(port); !bytes.EqualFold([]byte(u.Hostname()), tg.host) || p != tg.port {
					t.Fatalf("host, port = %q, %d; net/url says %q, %q", tg.host, tg.port, u.Hostname(), port)
				}
			}
		} else if statusOf(err) != 400 {
			t.Fatalf("parseAbsoluteTarget error %v has status %d", err, statusOf(err))
		}
		tg = target{}
		if err := parseAuthorityForm(data, &tg); err == nil {
			checkTarget(t, s, &tg)
			if !bytes.Equal(tg.authority, data) || tg.path != nil {
				t.Fatalf("authority %q, path %q for %q", tg.authority, tg.path, data)
			}
		} else if statusOf(err) != 400 {
			t.Fatalf("parseAuthorityForm error %v has status %d", err, statusOf(err))
		}
	})
}

// checkTarget checks an accepted target, and that its dial address reads
// back as the same host and port.
func checkTarget(t *testing.T, s *gate.Session, tg *target) {
	t.Helper()
	if len(tg.host) == 0 {
		t.Fatal("empty host accepted")
	}
	for _, c := range tg.host {
		if c == '@' || c == '/' || c <= ' ' || c >= 0x7f || c == '#' || c == '?' || c == '%' || c == '\\' {
			t.Fatalf("host %q holds %q", tg.host, c)
		}
	}
	if tg.port < 1 || tg.port > 65535 {
		t.Fatalf("port %d", tg.port)
	}
	if bytes.IndexByte(tg.authority, '@') >= 0 {
		t.Fatalf("authority %q holds userinfo", tg.authority)
	}
	addr := dialAddress(t, s, nil, tg)
	var back target
	if err := parseAuthorityForm(addr, &back); err != nil {
		t.Fatalf("dial address %q does not parse: %v", addr, err)
	}
	host := bytes.ToLower(tg.host)
	if ip, ok, _ := dialer.ParseHost(tg.host); ok && ip.Is4() {
		host = []byte(ip.String()) // an IPv4 spelling is dialed as its address
	}
	if !bytes.Equal(back.host, host) || back.port != tg.port || back.ipv6 != tg.ipv6 {
		t.Fatalf("dial address %q reads back as %q %d", addr, back.host, back.port)
	}
}
