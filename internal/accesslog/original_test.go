package accesslog

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestOriginalField checks where a transparent record's original
// destination goes: the text format's 20th field (the optional fields
// before it "-"), JSON's orig_dst, a template's {orig_dst}; and that a
// record without one has none of them.
func TestOriginalField(t *testing.T) {
	rec := Record{Time: time.Unix(1700000000, 0), Listener: "t", Client: netip.MustParseAddrPort("198.51.100.2:40000"),
		Protocol: ProtoTransparent, Method: "GET", Target: "http://origin.test/", Status: 200,
		Upstream: netip.MustParseAddrPort("192.0.2.100:80"), Rule: "lan", Original: netip.MustParseAddrPort("192.0.2.100:80")}
	line := func(format Format, template string, r Record) string {
		t.Helper()
		var buf bytes.Buffer
		l, err := New(Config{Format: format, Template: template, Writer: &buf})
		if err != nil {
			t.Fatal(err)
		}
		l.Log(&r)
		l.Close()
		return strings.TrimSpace(buf.String())
	}
	fields := strings.Fields(line(FormatText, "", rec))
	// The 21st field, after sni and intercepted ("-").
	if len(fields) != 21 || fields[20] != "192.0.2.100:80" || fields[4] != "transparent" || fields[18] != "-" || fields[19] != "-" {
		t.Errorf("text: %d fields %q", len(fields), fields)
	}
	if got := line(FormatJSON, "", rec); !strings.Contains(got, `"orig_dst":"192.0.2.100:80"`) || !strings.Contains(got, `"protocol":"transparent"`) {
		t.Errorf("json: %s", got)
	}
	if got := line(FormatTemplate, "{squid} {orig_dst}", rec); !strings.HasSuffix(got, " 192.0.2.100:80") {
		t.Errorf("template: %s", got)
	}
	if got := line(FormatCommon, "", rec); !strings.Contains(got, `"GET http://origin.test/ HTTP/1.1" 200`) {
		t.Errorf("common: %s", got)
	}
	rec.Original = netip.AddrPort{}
	if got := len(strings.Fields(line(FormatText, "", rec))); got != 13 {
		t.Errorf("text without an original destination: %d fields, want 13", got)
	}
	if got := line(FormatJSON, "", rec); strings.Contains(got, "orig_dst") {
		t.Errorf("json without an original destination: %s", got)
	}
}
