package accesslog

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSquidReasonsComplete checks that every Reason constant declared in
// accesslog.go is mapped to Squid's words, so that a new reason cannot
// be logged as a served request by accident.
func TestSquidReasonsComplete(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "accesslog.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				n++
				if _, ok := squidReasons[v]; !ok {
					t.Errorf("%s (%q) has no entry in squidReasons", name.Name, v)
				}
			}
		}
	}
	if n < 30 {
		t.Fatalf("found %d Reason constants in accesslog.go, want them all (30 or more)", n)
	}
	if len(squidReasons) != n {
		t.Errorf("squidReasons has %d entries for %d Reason constants", len(squidReasons), n)
	}
}

// TestSquidCodes checks the mapping of rustle's records to Squid's result
// code, status, hierarchy and error page.
func TestSquidCodes(t *testing.T) {
	up := netip.MustParseAddrPort("192.0.2.80:443")
	for _, tt := range []struct {
		name       string
		r          Record
		code, hier string
		err        string
	}{
		{"served GET", Record{Protocol: ProtoHTTP, Method: "GET", Status: 200, Upstream: up},
			"TCP_MISS/200", "HIER_DIRECT/192.0.2.80", "-"},
		{"CONNECT tunnel", Record{Protocol: ProtoConnect, Method: "CONNECT", Status: 200, Upstream: up},
			"TCP_TUNNEL/200", "HIER_DIRECT/192.0.2.80", "-"},
		{"h3 CONNECT-UDP", Record{Protocol: ProtoH3, Method: "CONNECT-UDP", Status: 200, Upstream: up},
			"TCP_TUNNEL/200", "HIER_DIRECT/192.0.2.80", "-"},
		{"SOCKS5 success", Record{Protocol: ProtoSOCKS5, Method: "CONNECT", Status: 0, HTTPStatus: 200, Upstream: up},
			"TCP_TUNNEL/200", "HIER_DIRECT/192.0.2.80", "-"},
		{"SOCKS4 granted", Record{Protocol: ProtoSOCKS4, Method: "CONNECT", Status: 90, HTTPStatus: 200, Upstream: up},
			"TCP_TUNNEL/200", "HIER_DIRECT/192.0.2.80", "-"},
		{"SOCKS5 closed unanswered", Record{Protocol: ProtoSOCKS5, Status: 0, Reason: ReasonCoolingDown},
			"TCP_DENIED/000", "HIER_NONE/-", "ERR_ACCESS_DENIED"},
		{"WebSocket upgrade", Record{Protocol: ProtoWebSocket, Method: "GET", Status: 101, Upstream: up},
			"TCP_MISS/101", "HIER_DIRECT/192.0.2.80", "-"},
		{"through a parent", Record{Protocol: ProtoHTTP, Method: "GET", Status: 200,
			Upstream: netip.MustParseAddrPort("[::ffff:192.0.2.81]:3128"), Route: "fleet", Parent: "squid"},
			"TCP_MISS/200", "FIRST_UP_PARENT/192.0.2.81", "-"},
		{"denied", Record{Protocol: ProtoHTTP, Method: "GET", Status: 403, Reason: ReasonDenied},
			"TCP_DENIED/403", "HIER_NONE/-", "ERR_ACCESS_DENIED"},
		{"forbidden destination", Record{Protocol: ProtoConnect, Method: "CONNECT", Status: 403, Reason: ReasonForbidden},
			"TCP_DENIED/403", "HIER_NONE/-", "ERR_ACCESS_DENIED"},
		{"no credentials", Record{Protocol: ProtoConnect, Method: "CONNECT", Status: 407, Reason: ReasonAuthMissing},
			"TCP_DENIED/407", "HIER_NONE/-", "ERR_CACHE_ACCESS_DENIED"},
		{"wrong SOCKS5 password", Record{Protocol: ProtoSOCKS5, Status: 1, HTTPStatus: 407, Reason: ReasonAuthFailed},
			"TCP_DENIED/407", "HIER_NONE/-", "ERR_CACHE_ACCESS_DENIED"},
		{"cooling down", Record{Protocol: ProtoHTTP, Method: "GET", Status: 429, Reason: ReasonCoolingDown},
			"TCP_DENIED/429", "HIER_NONE/-", "ERR_ACCESS_DENIED"},
		{"quota refused", Record{Protocol: ProtoHTTP, Method: "GET", Status: 429, Reason: ReasonQuota},
			"TCP_DENIED/429", "HIER_NONE/-", "ERR_ACCESS_DENIED"},
		{"quota cut a tunnel", Record{Protocol: ProtoConnect, Method: "CONNECT", Status: 200, Upstream: up, Reason: ReasonQuota},
			"TCP_TUNNEL_ABORTED/200", "HIER_DIRECT/192.0.2.80", "ERR_ACCESS_DENIED"},
		{"revoked tunnel", Record{Protocol: ProtoSOCKS5, Method: "CONNECT", HTTPStatus: 200, Upstream: up, Reason: ReasonRevoked},
			"TCP_TUNNEL_ABORTED/200", "HIER_DIRECT/192.0.2.80", "ERR_ACCESS_DENIED"},
		{"drained request", Record{Protocol: ProtoHTTP, Method: "GET", Status: 200, Upstream: up, Reason: ReasonDrained},
			"TCP_MISS_ABORTED/200", "HIER_DIRECT/192.0.2.80", "ERR_SHUTTING_DOWN"},
		{"bad request", Record{Protocol: ProtoHTTP, Status: 400, Reason: ReasonBadRequest},
			"NONE_NONE/400", "HIER_NONE/-", "ERR_INVALID_REQ"},
		{"head too large", Record{Protocol: ProtoHTTP, Method: "GET", Target: "http://x/", Status: 431, Reason: ReasonHeadTooLarge},
			"NONE_NONE/431", "HIER_NONE/-", "ERR_TOO_BIG"},
		{"head timeout", Record{Protocol: ProtoHTTP, Status: 408, Reason: ReasonHeadTimeout},
			"NONE_NONE_TIMEDOUT/408", "HIER_NONE/-", "ERR_REQUEST_PARSE_TIMEOUT"},
		{"body timeout", Record{Protocol: ProtoHTTP, Method: "POST", Status: 408, Upstream: up, Reason: ReasonBodyTimeout},
			"TCP_MISS_TIMEDOUT/408", "HIER_DIRECT/192.0.2.80", "ERR_READ_TIMEOUT"},
		{"TLS handshake failed", Record{Target: "sni.example", Reason: ReasonTLSHandshake},
			"NONE_NONE/000", "HIER_NONE/-", "ERR_SECURE_ACCEPT_FAIL"},
		{"HTTP to a SOCKS port", Record{Status: 400, Reason: ReasonNotSOCKS},
			"NONE_NONE/400", "HIER_NONE/-", "ERR_PROTOCOL_UNKNOWN"},
		{"overloaded", Record{Protocol: ProtoH2, Method: "GET", Status: 503, Reason: ReasonOverloaded},
			"NONE_NONE/503", "HIER_NONE/-", "ERR_GATEWAY_FAILURE"},
		{"unreachable", Record{Protocol: ProtoHTTP, Method: "GET", Status: 502, Reason: ReasonUnreachable},
			"TCP_MISS/502", "HIER_NONE/-", "ERR_CONNECT_FAIL"},
		{"CONNECT unreachable", Record{Protocol: ProtoConnect, Method: "CONNECT", Status: 502, Reason: ReasonUnreachable},
			"TCP_TUNNEL/502", "HIER_NONE/-", "ERR_CONNECT_FAIL"},
		{"timed out", Record{Protocol: ProtoHTTP, Method: "GET", Status: 504, Upstream: up, Reason: ReasonTimedOut},
			"TCP_MISS_TIMEDOUT/504", "HIER_DIRECT/192.0.2.80", "ERR_READ_TIMEOUT"},
		{"no such name", Record{Protocol: ProtoHTTP, Method: "GET", Status: 502, Reason: ReasonDNSFailed},
			"TCP_MISS/502", "HIER_NONE/-", "ERR_DNS_FAIL"},
		{"upstream failed", Record{Protocol: ProtoHTTP, Method: "GET", Status: 502, Upstream: up, Reason: ReasonUpstreamFailed},
			"TCP_MISS/502", "HIER_DIRECT/192.0.2.80", "ERR_INVALID_RESP"},
		{"no parent", Record{Protocol: ProtoHTTP, Method: "GET", Status: 502, Route: "fleet", Reason: ReasonNoParent},
			"TCP_MISS/502", "HIER_NONE/-", "ERR_CANNOT_FORWARD"},
		{"parent timed out", Record{Protocol: ProtoConnect, Method: "CONNECT", Status: 504, Route: "fleet", Reason: ReasonParentTimedOut},
			"TCP_TUNNEL_TIMEDOUT/504", "HIER_NONE/-", "ERR_CONNECT_FAIL"},
		{"a reason to come", Record{Protocol: ProtoHTTP, Method: "GET", Status: 200, Upstream: up, Reason: "some-new-reason"},
			"TCP_MISS/200", "HIER_DIRECT/192.0.2.80", "-"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.Time = t0
			line := string(appendSquid(nil, &tt.r))
			fields := strings.Fields(line)
			if len(fields) != 10 {
				t.Fatalf("%d fields, want 10: %q", len(fields), line)
			}
			if fields[3] != tt.code || fields[8] != tt.hier {
				t.Errorf("code %s, hierarchy %s; want %s, %s (%q)", fields[3], fields[8], tt.code, tt.hier, line)
			}
			if got := squidError(&tt.r); got != tt.err {
				t.Errorf("squid_error %s, want %s", got, tt.err)
			}
		})
	}
}

// TestSquidTimes checks the Squid line's time and elapsed fields: the
// end of the request in Unix seconds with milliseconds, and the whole
// milliseconds it took right-aligned in six columns, as Squid's
// "%9ld.%03d %6ld".
func TestSquidTimes(t *testing.T) {
	start := time.Date(2025, 6, 1, 12, 30, 45, 999_000_000, time.UTC)
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "1748781045.999      0 "},
		{1500 * time.Microsecond, "1748781046.000      1 "},
		{1234567 * time.Millisecond, "1748782280.566 1234567 "},
		{-time.Second, "1748781045.999      0 "},
	} {
		r := Record{Time: start, Duration: tt.d}
		if got := string(appendSquid(nil, &r)); !strings.HasPrefix(got, tt.want) {
			t.Errorf("duration %v: %q, want it to start %q", tt.d, got, tt.want)
		}
	}
}

// hostileRecords have spaces, quotes, brackets, newlines, control bytes,
// invalid UTF-8 and lone "-" in every string a client can choose.
func hostileRecords() []Record {
	values := []string{
		"a b", `a"b`, "a\nb\r\n", "\x00\x01\x1b[31m\x7f", "\xff\xfe", "[x] %41 \\ -", "-", "",
		"evil\n1748781045.123 0 1.2.3.4 TCP_MISS/200 0 GET http://forged/ - HIER_NONE/- -",
		`" 200 1 "-" "-"` + "\n127.0.0.1 - - [01/Jun/2025:12:30:45 +0000] \"GET /forged HTTP/1.1\" 200 1",
	}
	var recs []Record
	for i, v := range values {
		recs = append(recs, Record{
			Time: t0, Listener: v, Client: netip.MustParseAddrPort("192.0.2.1:1"), User: v,
			Protocol: Protocol(1 + i%8), Method: v, Target: "http://h/" + v, Status: 200, HTTPStatus: 200,
			BytesDown: int64(i), Upstream: netip.MustParseAddrPort("192.0.2.2:80"), Rule: v, Reason: v,
			Route: v, Parent: v,
		})
	}
	return recs
}

var (
	clfLine = regexp.MustCompile(`^(\S+) (\S+) (\S+) (\[[^\]]+\]) "([^"]*)" (\S+) (\S+)$`)
	// combinedLine is clfLine with the quoted Referer and User-Agent.
	combinedLine = regexp.MustCompile(`^(\S+) (\S+) (\S+) (\[[^\]]+\]) "([^"]*)" (\S+) (\S+) "([^"]*)" "([^"]*)"$`)
)

// checkOneLine fails unless line is one line ending in a newline, of
// printable ASCII but in JSON (which keeps UTF-8 and DEL), and returns it
// without the newline.
func checkOneLine(t *testing.T, format Format, line []byte) string {
	t.Helper()
	if len(line) == 0 || line[len(line)-1] != '\n' {
		t.Fatalf("%s line does not end in a newline: %q", format, line)
	}
	s := string(line[:len(line)-1])
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c > '~' && format != FormatJSON {
			t.Fatalf("%s line holds byte %#x at %d: %q", format, c, i, s)
		}
	}
	return s
}

// checkFields checks the line of r in format splits into the format's
// fields, and that the user unescapes back to r.User.
func checkFields(t *testing.T, format Format, r *Record, line string) {
	t.Helper()
	switch format {
	case FormatSquid:
		f := strings.Fields(line)
		if len(f) != 10 {
			t.Fatalf("squid line has %d fields, want 10: %q", len(f), line)
		}
		user := f[7]
		if r.User == "" {
			if user != "-" {
				t.Errorf("squid user %q, want -", user)
			}
		} else if got := unescapePercent(t, user); got != r.User {
			t.Errorf("squid user %q decodes to %q, want %q", user, got, r.User)
		}
	case FormatCommon, FormatCombined:
		re := clfLine
		if format == FormatCombined {
			re = combinedLine
		}
		m := re.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s line does not parse: %q", format, line)
		}
		if got := unescapeText(t, m[3]); got != r.User {
			t.Errorf("%s user %q unescapes to %q, want %q", format, m[3], got, r.User)
		}
		if req := m[5]; req != "-" && len(strings.Split(req, " ")) != 3 {
			t.Errorf("%s request %q is not METHOD TARGET VERSION", format, req)
		}
		if _, err := strconv.Atoi(m[6]); err != nil && m[6] != "-" {
			t.Errorf("%s status %q", format, m[6])
		}
	case FormatText:
		if n := len(strings.Split(line, " ")); n < 13 || n > 17 {
			t.Fatalf("text line has %d fields: %q", n, line)
		}
	case FormatJSON:
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("JSON line %q: %v", line, err)
		}
	}
}

// unescapePercent reverses appendPercent.
func unescapePercent(t *testing.T, s string) string {
	t.Helper()
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		n, err := strconv.ParseUint(s[i+1:min(i+3, len(s))], 16, 8)
		if err != nil {
			t.Fatalf("bad escape in %q: %v", s, err)
		}
		b.WriteByte(byte(n))
		i += 2
	}
	return b.String()
}

// simpleTemplate writes every field that holds no space of its own,
// separated by single spaces.
func simpleTemplate() (string, int) {
	var names []string
	for _, n := range TemplateFields() {
		if !slices.Contains([]string{"time_clf", "request_line", "squid", "common", "combined"}, n) {
			names = append(names, "{"+n+"}")
		}
	}
	return strings.Join(names, " "), len(names)
}

// TestHostileLines checks that every format writes a record of hostile
// strings as one line of printable ASCII that parses back into the
// format's fields: ten for squid, the NCSA fields for common and
// combined, one per field of a template.
func TestHostileLines(t *testing.T) {
	tmpl, n := simpleTemplate()
	simple, err := parseTemplate(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	quoted, err := parseTemplate(`{squid} {upstream} {source} "{request_line}" {time_clf} {combined} {user}`)
	if err != nil {
		t.Fatal(err)
	}
	quotedLine := regexp.MustCompile(`^((?:\S+ +){9}\S+) (\S+) (\S+) "([^"]*)" (\[[^\]]+\]) (.*) (\S+)$`)
	for i, r := range hostileRecords() {
		for _, format := range []Format{FormatText, FormatJSON, FormatSquid, FormatCommon, FormatCombined} {
			l := &Logger{format: format}
			line := checkOneLine(t, format, l.appendRecord(nil, &r))
			checkFields(t, format, &r, line)
		}
		line := checkOneLine(t, FormatTemplate, (&Logger{format: FormatTemplate, tmpl: simple}).appendRecord(nil, &r))
		if got := len(strings.Split(line, " ")); got != n {
			t.Errorf("record %d: the template of %d fields wrote %d: %q", i, n, got, line)
		}
		line = checkOneLine(t, FormatTemplate, (&Logger{format: FormatTemplate, tmpl: quoted}).appendRecord(nil, &r))
		m := quotedLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("record %d: template line does not parse: %q", i, line)
		}
		checkFields(t, FormatSquid, &r, m[1])
		checkFields(t, FormatCombined, &r, m[6])
		if got := unescapeText(t, m[7]); got != r.User {
			t.Errorf("record %d: template user %q unescapes to %q, want %q", i, m[7], got, r.User)
		}
	}
}

func TestParseTemplate(t *testing.T) {
	for _, tt := range []struct {
		tmpl string
		err  string // "" = valid
	}{
		{"{time} {client} {user}", ""},
		{"{squid} {upstream} {source}", ""},
		{"{combined}\t{upstream_ip}\t{source_ip}", ""},
		{"{{literal}} {time}", ""},
		{"no fields at all", ""},
		{"", "empty"},
		{"{time} {clinet}", "unknown field {clinet} at byte 7; the fields are time, "},
		{"{Time}", "unknown field {Time} at byte 0"},
		{"{}", "unknown field {} at byte 0"},
		{"{time} {user", "unclosed { at byte 7"},
		{"{time}\n{user}", "control character 0x0a at byte 6"},
		{"{time}\r", "control character 0x0d at byte 6"},
		{"{time}\x7f", "control character 0x7f at byte 6"},
	} {
		t.Run(tt.tmpl, func(t *testing.T) {
			err := ValidateTemplate(tt.tmpl)
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("ValidateTemplate(%q) = %v, want nil", tt.tmpl, err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("ValidateTemplate(%q) = %v, want an error containing %q", tt.tmpl, err, tt.err)
			}
		})
	}
	tm, err := parseTemplate("{{x}} {status}}")
	if err != nil {
		t.Fatal(err)
	}
	r := Record{Status: 204}
	if got := string(tm.append(nil, &r)); got != "{x}} 204}" {
		t.Errorf("{{x}} {status}} wrote %q, want %q", got, "{x}} 204}")
	}
}

// TestTemplateCoversJSON checks that every key a JSON line can hold is a
// template field, so that what one format can write every format can.
func TestTemplateCoversJSON(t *testing.T) {
	r := Record{
		Time: t0, Listener: "l", Client: netip.MustParseAddrPort("192.0.2.1:1"), User: "u",
		Protocol: ProtoHTTP, Method: "GET", Target: "http://x/", Status: 200, BytesUp: 1, BytesDown: 2,
		Duration: time.Second, Upstream: netip.MustParseAddrPort("192.0.2.2:80"), Rule: "r",
		Reason: ReasonDrained, Source: netip.MustParseAddrPort("192.0.2.3:4000"), Route: "ro", Parent: "p",
		SNI: "s.example",
	}
	var m map[string]any
	if err := json.Unmarshal(appendJSON(nil, &r), &m); err != nil {
		t.Fatal(err)
	}
	fields := TemplateFields()
	for k := range m {
		if !slices.Contains(fields, k) {
			t.Errorf("JSON key %q is not a template field", k)
		}
	}
	if len(m) != 18 {
		t.Errorf("the full record has %d JSON keys, want 18: %v", len(m), m)
	}
}

func TestNewTemplateErrors(t *testing.T) {
	if _, err := New(Config{Format: FormatTemplate, Template: "{time} {nope}"}); err == nil ||
		!strings.Contains(err.Error(), "unknown field {nope}") {
		t.Errorf("New with an unknown template field = %v, want an error naming it", err)
	}
	if _, err := New(Config{Format: FormatTemplate}); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("New with format template and no template = %v, want an error", err)
	}
	if _, err := New(Config{Format: FormatJSON, Template: "{time}"}); err == nil || !strings.Contains(err.Error(), "only for") {
		t.Errorf("New with a template for format json = %v, want an error", err)
	}
}

// TestDocsName checks that docs/operations.md names every template field
// in its Templates section and maps every reason to Squid's words in its
// section on the formats other tools read.
func TestDocsName(t *testing.T) {
	b, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	section := func(title string) string {
		t.Helper()
		_, rest, ok := strings.Cut(string(b), "\n### "+title+"\n")
		if !ok {
			t.Fatalf("docs/operations.md has no section %q", title)
		}
		body, _, _ := strings.Cut(rest, "\n### ")
		return body
	}
	templates := section("Templates")
	for _, f := range TemplateFields() {
		if !strings.Contains(templates, "`"+f+"`") {
			t.Errorf("the Templates section does not name the field `%s`", f)
		}
	}
	formats := section("Formats other tools read")
	for reason, sr := range squidReasons {
		mapped := false
		for line := range strings.Lines(formats) {
			if strings.HasPrefix(line, "| ") && strings.Contains(line, "`"+reason+"`") {
				mapped = strings.Contains(line, "`"+sr.err+"`")
				break
			}
		}
		if !mapped {
			t.Errorf("no row of the table of Squid codes maps `%s` to `%s`", reason, sr.err)
		}
	}
}

// TestFormatsDoNotAllocate checks that the writer formats a record in
// every format without allocating, as BenchmarkFormat reports.
func TestFormatsDoNotAllocate(t *testing.T) {
	tmpl, err := parseTemplate("{combined} {upstream} {source} {squid_code} {squid_error} {time_clf} {request_line}")
	if err != nil {
		t.Fatal(err)
	}
	recs := append(goldenRecords(), hostileRecords()...)
	buf := make([]byte, 0, 64<<10)
	for _, f := range []Format{FormatText, FormatJSON, FormatSquid, FormatCommon, FormatCombined, FormatTemplate} {
		l := &Logger{format: f, tmpl: tmpl}
		if n := testing.AllocsPerRun(10, func() {
			b := buf[:0]
			for i := range recs {
				b = l.appendRecord(b, &recs[i])
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per batch of %d records, want 0", f, n, len(recs))
		}
	}
}
