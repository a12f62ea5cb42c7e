package accesslog

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

var t0 = time.Date(2025, 6, 1, 12, 30, 45, 123456789, time.UTC)

// goldenRecords covers every protocol, empty fields, hostile strings and
// the address forms.
func goldenRecords() []Record {
	return []Record{
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.10:51234"),
			User: "alice", Protocol: ProtoHTTP, Method: "GET", Target: "http://example.com/index.html?q=1",
			Status: 200, BytesUp: 0, BytesDown: 5120, Duration: 12345678 * time.Nanosecond,
			Upstream: netip.MustParseAddrPort("93.184.216.34:80"), Rule: "allow-all",
		},
		{
			Time: t0.Add(time.Second), Listener: "main", Client: netip.MustParseAddrPort("[2001:db8::7]:40000"),
			Protocol: ProtoConnect, Method: "CONNECT", Target: "example.com:443",
			Status: 200, BytesUp: 1830, BytesDown: 60211, Duration: 95 * time.Second,
			Upstream: netip.MustParseAddrPort("[2606:2800:220:1::1]:443"),
		},
		{
			Time: t0, Listener: "tls", Client: netip.MustParseAddrPort("[::ffff:198.51.100.4]:1000"),
			User: "bob", Protocol: ProtoWebSocket, Method: "GET", Target: "http://chat.example/ws",
			Status: 101, BytesUp: 10, BytesDown: 20, Duration: time.Millisecond,
			Upstream: netip.MustParseAddrPort("[::ffff:203.0.113.9]:80"),
		},
		{
			Time: t0, Listener: "tls", Client: netip.MustParseAddrPort("127.0.0.1:2"), Protocol: ProtoH2,
			Method: "POST", Target: "https://api.example/v1", Status: 502, BytesUp: 7, Duration: 500 * time.Microsecond,
		},
		{
			Time: t0, Listener: "socks", Client: netip.MustParseAddrPort("127.0.0.1:3"), User: "-",
			Protocol: ProtoSOCKS5, Method: "CONNECT", Target: "we ird\n\"host\"\\\xff\x00:80",
			Status: 4, HTTPStatus: 502, Duration: 3 * time.Second, Rule: "deny private",
		},
		{
			Time: t0, Listener: "socks", Client: netip.MustParseAddrPort("127.0.0.1:4"), User: "zoë",
			Protocol: ProtoSOCKS5UDP, Method: "UDP", Target: "198.51.100.1:53", BytesUp: 64, BytesDown: 512,
			HTTPStatus: 200, Duration: -time.Second, Upstream: netip.MustParseAddrPort("198.51.100.1:53"), Rule: "line\u2028sep",
		},
		{Time: t0}, // everything else zero
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("127.0.0.1:5"), User: "bob",
			Protocol: ProtoConnect, Method: "CONNECT", Target: "example.com:443", Status: 200,
			BytesUp: 3, BytesDown: 4, Duration: 2 * time.Second,
			Upstream: netip.MustParseAddrPort("192.0.2.1:443"), Reason: ReasonRevoked,
		},
		{
			Time: t0, Listener: "socks", Client: netip.MustParseAddrPort("127.0.0.1:6"),
			Protocol: ProtoSOCKS4, Method: "CONNECT", Target: "192.0.2.9:80", Status: 91, HTTPStatus: 407,
			Reason: ReasonAuthMissing,
		},
		{
			Time: t0, Listener: "egress", Client: netip.MustParseAddrPort("127.0.0.1:7"), User: "alice",
			Protocol: ProtoConnect, Method: "CONNECT", Target: "example.com:443", Status: 200,
			Upstream: netip.MustParseAddrPort("[2001:db8:ff::1]:443"), Source: netip.MustParseAddrPort("[2001:db8:1::42]:40001"),
		},
		{
			Time: t0, Listener: "egress", Client: netip.MustParseAddrPort("127.0.0.1:8"),
			Protocol: ProtoHTTP, Method: "GET", Target: "http://example.com/", Status: 502,
			Reason: ReasonDNSFailed, Source: netip.MustParseAddrPort("203.0.113.7:40002"),
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("127.0.0.1:7"), User: "alice",
			Protocol: ProtoConnect, Method: "CONNECT", Target: "example.com:443", Status: 200,
			BytesUp: 5, BytesDown: 6, Duration: time.Second,
			Upstream: netip.MustParseAddrPort("127.0.0.1:3128"), Route: "fleet", Parent: "squid",
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("127.0.0.1:8"),
			Protocol: ProtoHTTP, Method: "GET", Target: "http://example.com/", Status: 502,
			Reason: ReasonUnreachable, Route: "fleet",
		},
		{
			Time: t0, Listener: "egress", Client: netip.MustParseAddrPort("127.0.0.1:9"), User: "carol",
			Protocol: ProtoHTTP, Method: "GET", Target: "http://example.com/", Status: 200,
			Upstream: netip.MustParseAddrPort("192.0.2.3:3128"), Source: netip.MustParseAddrPort("203.0.113.7:40003"),
			Route: "fleet", Parent: "squid",
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.10:51235"), User: "mallory",
			Protocol: ProtoHTTP, Method: "GET", Target: "http://blocked.example/", Status: 403,
			Rule: "no-blocked", Reason: ReasonDenied,
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.10:51236"), User: "alice",
			Protocol: ProtoH2, Method: "CONNECT", Target: "example.com:443", Status: 200,
			BytesUp: 100, BytesDown: 200, Duration: 1500 * time.Millisecond,
			Upstream: netip.MustParseAddrPort("93.184.216.34:443"), Reason: ReasonQuota,
		},
		{
			Time: t0, Listener: "tls", Client: netip.MustParseAddrPort("192.0.2.11:4000"),
			Target: "sni.example", Reason: ReasonTLSHandshake,
		},
		{
			Time: t0, Listener: "socks", Client: netip.MustParseAddrPort("192.0.2.12:4001"), User: "eve",
			Protocol: ProtoSOCKS5, Status: 1, HTTPStatus: 407, Reason: ReasonAuthFailed,
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.13:4002"),
			Protocol: ProtoHTTP, Method: "GET", Target: "http://slow.example/", Status: 504,
			Duration: 60 * time.Second, Reason: ReasonTimedOut,
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.14:4003"), User: "dave",
			Protocol: ProtoConnect, Method: "CONNECT", Target: "tracker.example:443", Status: 200,
			BytesUp: 300, BytesDown: 4000, Duration: 2 * time.Second,
			Upstream: netip.MustParseAddrPort("198.51.100.20:443"), Rule: "block ads", WouldDeny: "block ads",
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.14:4004"),
			Protocol: ProtoHTTP, Method: "GET", Target: "http://new.example/", Status: 200,
			Upstream: netip.MustParseAddrPort("198.51.100.21:80"), Rule: "default", WouldDeny: "default",
			Route: "fleet",
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.14:4003"), User: "alice",
			Protocol: ProtoConnect, Method: "CONNECT", Target: "api.example:443", Status: 200,
			BytesUp: 517, BytesDown: 4000, Duration: 2 * time.Second,
			Upstream: netip.MustParseAddrPort("192.0.2.20:443"), SNI: "api.example",
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.14:4004"), User: "alice",
			Protocol: ProtoH2, Method: "CONNECT", Target: "api.example:443", Status: 200,
			Duration: 3 * time.Millisecond, Rule: "api", Reason: ReasonSNIMismatch, SNI: "blocked.example",
		},
		{
			Time: t0, Listener: "socks", Client: netip.MustParseAddrPort("192.0.2.15:4005"),
			Protocol: ProtoSOCKS5, Method: "CONNECT", Target: "192.0.2.21:443", HTTPStatus: 200,
			BytesUp: 21, BytesDown: 40, Duration: time.Second,
			Upstream: netip.MustParseAddrPort("192.0.2.21:443"), SNI: "[not-tls]",
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.14:4006"), User: "alice",
			Protocol: ProtoHTTP, Method: "POST", Target: "https://api.example/v1/chat", Status: 200,
			BytesUp: 120, BytesDown: 900, Duration: 40 * time.Millisecond,
			Upstream: netip.MustParseAddrPort("192.0.2.20:443"), Rule: "api", SNI: "api.example", Intercepted: true,
		},
		{
			Time: t0, Listener: "main", Client: netip.MustParseAddrPort("192.0.2.14:4007"),
			Protocol: ProtoConnect, Method: "CONNECT", Target: "pinned.example:443", Status: 200,
			Duration: 5 * time.Millisecond, Reason: ReasonClientRejectedCert, Intercepted: true,
		},
	}
}

// goldenTemplate is the template of template.golden: the Squid line
// with the upstream's port and the egress source appended, then every
// other field.
const goldenTemplate = "{squid} {upstream} {source} | {time} {time_unix} {time_end_unix} {time_clf} {listener} " +
	"{client} {client_ip} {user} {protocol} {method} {target} \"{request_line}\" {status} {http_status} " +
	"{bytes_up} {bytes_down} {duration_ms} {upstream_ip} {rule} {reason} {source_ip} {route} {parent} {would_deny} {sni} {intercepted} " +
	"{squid_code} {squid_hierarchy} {squid_error} {{ {common} | {combined}"

func TestFormatsGolden(t *testing.T) {
	for _, format := range []Format{FormatText, FormatJSON, FormatSquid, FormatCommon, FormatCombined, FormatTemplate} {
		t.Run(string(format), func(t *testing.T) {
			var out syncBuffer
			cfg := Config{Format: format, Writer: &out}
			if format == FormatTemplate {
				cfg.Template = goldenTemplate
			}
			l := newTestLogger(t, cfg)
			for _, r := range goldenRecords() {
				l.Log(&r)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", string(format)+".golden")
			got := out.Bytes()
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s output differs from %s (-want +got):\n%s", format, golden, diff)
			}
		})
	}
}

// TestJSONDecodes checks that every JSON line is an object whose fields
// decode to the record's values.
func TestJSONDecodes(t *testing.T) {
	for i, r := range goldenRecords() {
		line := appendJSON(nil, &r)
		var got struct {
			Time       string  `json:"time"`
			Listener   string  `json:"listener"`
			Client     string  `json:"client"`
			User       string  `json:"user"`
			Protocol   string  `json:"protocol"`
			Method     string  `json:"method"`
			Target     string  `json:"target"`
			Status     int     `json:"status"`
			BytesUp    int64   `json:"bytes_up"`
			BytesDown  int64   `json:"bytes_down"`
			DurationMS float64 `json:"duration_ms"`
			Upstream   string  `json:"upstream"`
			Rule       string  `json:"rule"`
			Reason     string  `json:"reason"`
			Source     string  `json:"source"`
			Route      string  `json:"route"`
			Parent     string  `json:"parent"`
			WouldDeny  string  `json:"would_deny"`
			SNI        string  `json:"sni"`
			Intercept  bool    `json:"intercepted"`
		}
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("record %d: %v in %s", i, err, line)
		}
		tm, err := time.Parse(time.RFC3339Nano, got.Time)
		if err != nil || !tm.Equal(r.Time.Truncate(time.Millisecond)) {
			t.Errorf("record %d: time %q (%v), want %v", i, got.Time, err, r.Time.Truncate(time.Millisecond))
		}
		check := func(name, got, want string) {
			t.Helper()
			if got != want {
				t.Errorf("record %d: %s = %q, want %q", i, name, got, want)
			}
		}
		check("listener", got.Listener, r.Listener)
		check("user", got.User, r.User)
		check("method", got.Method, r.Method)
		check("target", got.Target, validUTF8(r.Target))
		check("rule", got.Rule, r.Rule)
		check("reason", got.Reason, r.Reason)
		check("route", got.Route, r.Route)
		check("parent", got.Parent, r.Parent)
		check("would_deny", got.WouldDeny, r.WouldDeny)
		check("sni", got.SNI, r.SNI)
		if got.Intercept != r.Intercepted {
			t.Errorf("record %d: intercepted = %v, want %v", i, got.Intercept, r.Intercepted)
		}
		check("client", got.Client, addrString(r.Client))
		check("upstream", got.Upstream, addrString(r.Upstream))
		check("source", got.Source, addrString(r.Source))
		if r.Protocol != 0 {
			check("protocol", got.Protocol, r.Protocol.String())
		}
		if got.Status != r.Status || got.BytesUp != r.BytesUp || got.BytesDown != r.BytesDown {
			t.Errorf("record %d: status, up, down = %d, %d, %d; want %d, %d, %d", i,
				got.Status, got.BytesUp, got.BytesDown, r.Status, r.BytesUp, r.BytesDown)
		}
		if want := float64(max(r.Duration.Microseconds(), 0)) / 1000; got.DurationMS != want {
			t.Errorf("record %d: duration_ms = %v, want %v", i, got.DurationMS, want)
		}
	}
}

// TestTextFields checks that every text line has 13 fields, a 14th when
// the record has a Reason, a 15th when it has a Source, 17 when it has a
// TestTextFields checks that every text line has 13 fields, a 14th when
// the record has a Reason, a 15th when it has a Source, 17 when it has a
// Route or Parent, 18 when it has a WouldDeny, 19 when it has an SNI and
// 20 when it is intercepted (the fields before the last set ones "-"),
// that unescape to the record's values.
func TestTextFields(t *testing.T) {
	for i, r := range goldenRecords() {
		line := appendText(nil, &r)
		fields := strings.Split(strings.TrimSuffix(string(line), "\n"), " ")
		routed := r.Route != "" || r.Parent != ""
		want := 13
		switch {
		case r.Intercepted:
			want = 20
		case r.SNI != "":
			want = 19
		case r.WouldDeny != "":
			want = 18
		case routed:
			want = 17
		case r.Source.IsValid():
			want = 15
		case r.Reason != "":
			want = 14
		}
		if len(fields) != want {
			t.Fatalf("record %d: %d fields, want %d: %q", i, len(fields), want, line)
		}
		expect := map[int]string{1: r.Listener, 3: r.User, 5: r.Method, 6: r.Target, 12: r.Rule}
		if want > 13 {
			expect[13] = r.Reason
		}
		if want >= 17 {
			expect[15], expect[16] = r.Route, r.Parent
		}
		if want == 18 {
			expect[17] = r.WouldDeny
		}
		if want >= 19 {
			expect[17], expect[18] = r.WouldDeny, r.SNI
		}
		if want == 20 {
			expect[19] = "intercepted"
		}
		for j, want := range expect {
			if got := unescapeText(t, fields[j]); got != want {
				t.Errorf("record %d field %d: %q unescapes to %q, want %q", i, j, fields[j], got, want)
			}
		}
		if got, want := fields[2], orDash(addrString(r.Client)); got != want {
			t.Errorf("record %d: client %q, want %q", i, got, want)
		}
		if want > 14 {
			if got, want := fields[14], orDash(addrString(r.Source)); got != want {
				t.Errorf("record %d: source %q, want %q", i, got, want)
			}
		}
	}
}

func TestProtocolString(t *testing.T) {
	want := map[Protocol]string{
		0: "-", ProtoHTTP: "http", ProtoConnect: "connect", ProtoWebSocket: "websocket",
		ProtoH2: "h2", ProtoSOCKS5: "socks5", ProtoSOCKS5UDP: "socks5-udp", 200: "-",
	}
	for p, w := range want {
		if got := p.String(); got != w {
			t.Errorf("Protocol(%d).String() = %q, want %q", p, got, w)
		}
	}
}

// FuzzFormat checks that any strings make a valid JSON line that decodes
// back to them (invalid UTF-8 replaced), a text line of 13 fields that
// unescape back to them, and squid, common and combined lines of their
// fields, whose user decodes back to the user.
func FuzzFormat(f *testing.F) {
	f.Add("http://example.com/", "alice")
	f.Add("a b\n\"c\"\\\x00\xff\u2028", "-")
	f.Fuzz(func(t *testing.T, target, user string) {
		r := Record{Time: t0, Target: target, User: user, Protocol: ProtoHTTP, Method: user}
		line := appendJSON(nil, &r)
		if !bytes.HasSuffix(line, []byte("\n")) || bytes.Count(line, []byte("\n")) != 1 {
			t.Fatalf("JSON line is not one line: %q", line)
		}
		var got map[string]any
		if err := json.Unmarshal(line, &got); err != nil {
			t.Fatalf("invalid JSON %q: %v", line, err)
		}
		if got["target"] != validUTF8(target) || got["user"] != validUTF8(user) {
			t.Fatalf("JSON target, user = %q, %q; want %q, %q", got["target"], got["user"], validUTF8(target), validUTF8(user))
		}

		text := appendText(nil, &r)
		fields := strings.Split(strings.TrimSuffix(string(text), "\n"), " ")
		if len(fields) != 13 {
			t.Fatalf("text line has %d fields, want 13: %q", len(fields), text)
		}
		for _, c := range text[:len(text)-1] {
			if c < ' ' || c > '~' {
				t.Fatalf("text line holds byte %#x: %q", c, text)
			}
		}
		if got := unescapeText(t, fields[6]); got != target {
			t.Fatalf("text target %q unescapes to %q, want %q", fields[6], got, target)
		}
		if got := unescapeText(t, fields[3]); got != user {
			t.Fatalf("text user %q unescapes to %q, want %q", fields[3], got, user)
		}

		for _, format := range []Format{FormatSquid, FormatCommon, FormatCombined} {
			l := &Logger{format: format}
			checkFields(t, format, &r, checkOneLine(t, format, l.appendRecord(nil, &r)))
		}
	})
}

// validUTF8 replaces each byte of s that is not part of valid UTF-8 with
// U+FFFD, as AppendJSONString does.
func validUTF8(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		b.WriteRune(r) // RuneError for an invalid byte
		i += size
	}
	return b.String()
}

// unescapeText reverses appendTextField.
func unescapeText(t *testing.T, f string) string {
	t.Helper()
	if f == "-" {
		return ""
	}
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '\\' {
			b.WriteByte(f[i])
			continue
		}
		if i+4 > len(f) || f[i+1] != 'x' {
			t.Fatalf("bad escape in %q", f)
		}
		n, err := strconv.ParseUint(f[i+2:i+4], 16, 8)
		if err != nil {
			t.Fatalf("bad escape in %q: %v", f, err)
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String()
}

func addrString(a netip.AddrPort) string {
	if !a.IsValid() {
		return ""
	}
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port()).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
