package http1

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// rawHead joins a start line and field lines with CRLF and ends the head
// with the empty line.
func rawHead(lines ...string) []byte {
	return []byte(strings.Join(lines, "\r\n") + "\r\n\r\n")
}

// statusOf returns the status a client is answered for err: 0 for nil,
// the parseError's status, or -1 for an error of another type.
func statusOf(err error) int {
	if err == nil {
		return 0
	}
	var pe *ParseError
	if errors.As(err, &pe) {
		return pe.Status
	}
	return -1
}

// fieldLines lists the header lines of h in order, each dropped one
// prefixed with "-".
func fieldLines(h *Head) []string {
	var out []string
	for _, f := range h.Fields {
		l := string(f.Line.Of(h.Buf))
		if f.Drop {
			l = "-" + l
		}
		out = append(out, l)
	}
	return out
}

// connTokens lists the Connection options h recorded.
func connTokens(h *Head) []string {
	var out []string
	for _, s := range h.connTokens[:h.nConnTokens] {
		out = append(out, string(s.Of(h.Buf)))
	}
	return out
}

// checkSpans reports a span of h that does not lie within h.buf, or a
// header whose name and value are not inside its line.
func checkSpans(h *Head) error {
	n := int32(len(h.Buf))
	in := func(what string, s Span) error {
		if s.Start < 0 || s.End < s.Start || s.End > n {
			return fmt.Errorf("%s span %v outside buffer of %d bytes", what, s, n)
		}
		return nil
	}
	if err := errors.Join(in("method", h.Method), in("target", h.Target),
		in("statusReason", h.Reason), in("proxyAuth", h.ProxyAuth)); err != nil {
		return err
	}
	for i, f := range h.Fields {
		if err := errors.Join(in("line", f.Line), in("name", f.Name), in("value", f.Value)); err != nil {
			return fmt.Errorf("header %d: %w", i, err)
		}
		if f.Name.Start != f.Line.Start || f.Name.End >= f.Line.End && f.Name.End != f.Line.End ||
			f.Value.Start < f.Name.End || f.Value.End > f.Line.End {
			return fmt.Errorf("header %d: name %v or value %v outside line %v", i, f.Name, f.Value, f.Line)
		}
	}
	for i, s := range h.connTokens[:h.nConnTokens] {
		if err := in(fmt.Sprintf("connection token %d", i), s); err != nil {
			return err
		}
	}
	if h.HostIdx < -1 || h.HostIdx >= len(h.Fields) {
		return fmt.Errorf("hostIdx %d with %d headers", h.HostIdx, len(h.Fields))
	}
	return nil
}

func TestParseRequestMethods(t *testing.T) {
	methods := []string{
		"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
		// Extension and unknown methods are tokens like any other.
		"PROPFIND", "MKCOL", "M-SEARCH", "BREW", "X_CUSTOM.1", "get", "!#$%&'*+-.^_`|~",
	}
	for _, m := range methods {
		t.Run(m, func(t *testing.T) {
			var h Head
			b := rawHead(m+" http://example.com/ HTTP/1.1", "Host: example.com")
			if err := h.ParseRequest(b); err != nil {
				t.Fatalf("parseRequest: %v", err)
			}
			if got := string(h.Method.Of(h.Buf)); got != m {
				t.Errorf("method = %q, want %q", got, m)
			}
			if got := string(h.Target.Of(h.Buf)); got != "http://example.com/" {
				t.Errorf("target = %q", got)
			}
			if err := checkSpans(&h); err != nil {
				t.Error(err)
			}
		})
	}
	bad := []string{"GE(T", "GE\"T", "G,ET", "GE/T", "GE:T", "GE@T", "G\xc3\x89T", "GE\x00T", "GE\x7fT", "GET\t/"}
	for _, m := range bad {
		t.Run(fmt.Sprintf("bad%q", m), func(t *testing.T) {
			var h Head
			err := h.ParseRequest(rawHead(m + " / HTTP/1.1"))
			if err != errBadMethod {
				t.Fatalf("parseRequest: %v, want %v", err, errBadMethod)
			}
			if statusOf(err) != 400 {
				t.Errorf("status %d, want 400", statusOf(err))
			}
		})
	}
}

func TestParseRequestVersion(t *testing.T) {
	tests := []struct {
		version   string
		wantMinor int
		wantErr   error
	}{
		{"HTTP/1.1", 1, nil},
		{"HTTP/1.0", 0, nil},
		// A later HTTP/1.x minor is accepted (RFC 9110 §6.2) and treated
		// as neither 1.0 nor 1.1 by the forwarder.
		{"HTTP/1.2", 2, nil},
		{"HTTP/2.0", 0, errVersion},
		{"HTTP/0.9", 0, errVersion},
		{"HTTP/3.0", 0, errVersion},
		{"HTTP/9.9", 0, errVersion},
		{"HTTP/2", 0, errBadVersion},
		{"HTTP/1", 0, errBadVersion},
		{"HTTP/1.", 0, errBadVersion},
		{"HTTP/1.10", 0, errBadVersion},
		{"HTTP/11.1", 0, errBadVersion},
		{"HTTP/1.x", 0, errBadVersion},
		{"HTTP/x.1", 0, errBadVersion},
		{"HTTP/1,1", 0, errBadVersion},
		{"http/1.1", 0, errBadVersion},
		{"HTTPS/1.1", 0, errBadVersion},
		{"HTTP/1.1 ", 0, errBadVersion},
		{"HTTP/1.1\t", 0, errBadVersion},
		{"XTTP/1.1", 0, errBadVersion},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			var h Head
			err := h.ParseRequest(rawHead("GET http://h/ "+tt.version, "Host: h"))
			if err != tt.wantErr {
				t.Fatalf("parseRequest: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				want := 400
				if tt.wantErr == errVersion {
					want = 505
				}
				if statusOf(err) != want {
					t.Errorf("status %d, want %d", statusOf(err), want)
				}
				return
			}
			if h.Minor != tt.wantMinor {
				t.Errorf("minor = %d, want %d", h.Minor, tt.wantMinor)
			}
		})
	}
}

func TestParseRequestLine(t *testing.T) {
	tests := []struct {
		name    string
		head    string
		wantErr error
	}{
		{"empty line", "\r\n\r\n", errBadRequestLine},
		// readHead strips empty lines before a head (see
		// TestReadHeadLeadingEmptyLines); parseRequest itself refuses them.
		{"leading empty line", "\r\nGET / HTTP/1.1\r\n\r\n", errBadRequestLine},
		{"leading space", " GET / HTTP/1.1\r\n\r\n", errBadRequestLine},
		{"method only", "GET\r\n\r\n", errBadRequestLine},
		{"no version", "GET /\r\n\r\n", errBadRequestLine},
		{"no version trailing space", "GET / \r\n\r\n", errBadVersion},
		{"double space", "GET  / HTTP/1.1\r\n\r\n", errBadRequestLine},
		{"space in target", "GET /a b HTTP/1.1\r\n\r\n", errBadVersion},
		{"tab separator", "GET\t/\tHTTP/1.1\r\n\r\n", errBadRequestLine},
		{"tab in target", "GET /a\tb HTTP/1.1\r\n\r\n", errBadTarget},
		{"NUL in target", "GET /a\x00b HTTP/1.1\r\n\r\n", errBadTarget},
		{"DEL in target", "GET /a\x7fb HTTP/1.1\r\n\r\n", errBadTarget},
		{"control in target", "GET /a\x01b HTTP/1.1\r\n\r\n", errBadTarget},
		{"bare CR in request line", "GET /a\rb HTTP/1.1\r\n\r\n", errBareCR},
		{"bare LF ends request line", "GET / HTTP/1.1\n\r\n", errBareCR},
		{"bare LF in request line", "GET /\n HTTP/1.1\r\n\r\n", errBareCR},
		{"no CRLF at all", "GET / HTTP/1.1", errBareCR},
		{"no empty line", "GET / HTTP/1.1\r\n", errBareCR},
		{"half empty line", "GET / HTTP/1.1\r\n\r", errBareCR},
		{"empty", "", errBareCR},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Head
			err := h.ParseRequest([]byte(tt.head))
			if err != tt.wantErr {
				t.Fatalf("parseRequest(%q): %v, want %v", tt.head, err, tt.wantErr)
			}
			if statusOf(err) != 400 {
				t.Errorf("status %d, want 400", statusOf(err))
			}
		})
	}
}

func TestParseRequestHeaderSyntax(t *testing.T) {
	tests := []struct {
		name      string
		field     string
		wantErr   error
		wantValue string
	}{
		{"plain", "X-Foo: bar", nil, "bar"},
		{"no space", "X-Foo:bar", nil, "bar"},
		{"OWS trimmed", "X-Foo: \t bar \t", nil, "bar"},
		{"inner spaces kept", "X-Foo: a  \tb", nil, "a  \tb"},
		{"empty value", "X-Foo:", nil, ""},
		{"only OWS", "X-Foo: \t ", nil, ""},
		{"all tchars", "!#$%&'*+-.^_`|~09azAZ: v", nil, "v"},
		{"obs-text value", "X-Foo: caf\xc3\xa9 \xff", nil, "caf\xc3\xa9 \xff"},
		{"colon in value", "X-Foo: a:b::", nil, "a:b::"},
		{"space before colon", "Host : h", errSpaceColon, ""},
		{"tab before colon", "Host\t: h", errSpaceColon, ""},
		{"space in name", "X Foo: v", errBadHeaderName, ""},
		{"empty name", ": v", errBadHeaderName, ""},
		{"no colon", "X-Foo", errBadHeaderName, ""},
		{"separator in name", "X(Foo): v", errBadHeaderName, ""},
		{"slash in name", "X/Foo: v", errBadHeaderName, ""},
		{"non-ASCII name", "X-F\xc3\xb6o: v", errBadHeaderName, ""},
		{"NUL in name", "X-F\x00o: v", errBadHeaderName, ""},
		{"NUL in value", "X-Foo: a\x00b", errBadHeaderValue, ""},
		{"NUL ends value", "X-Foo: ab\x00", errBadHeaderValue, ""},
		{"DEL in value", "X-Foo: a\x7fb", errBadHeaderValue, ""},
		{"control in value", "X-Foo: a\x01b", errBadHeaderValue, ""},
		{"VT in value", "X-Foo: \x0bb", errBadHeaderValue, ""},
		{"FF in value", "X-Foo: a\x0c", errBadHeaderValue, ""},
		{"bare CR in value", "X-Foo: a\rb", errBareCR, ""},
		{"bare CR ends line", "X-Foo: a\r\rX-Bar: b", errBareCR, ""},
		{"bare LF in value", "X-Foo: a\nb", errBareCR, ""},
		{"bare LF ends line", "X-Foo: a\nX-Bar: b", errBareCR, ""},
		{"bare CR in name", "X-F\roo: a", errBareCR, ""},
		{"obs-fold space", "X-Foo: a\r\n b", errObsFold, ""},
		{"obs-fold tab", "X-Foo: a\r\n\tb", errObsFold, ""},
		{"obs-fold first line", " X-Foo: a", errObsFold, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Head
			err := h.ParseRequest(rawHead("GET http://h/ HTTP/1.1", "Host: h", tt.field))
			if err != tt.wantErr {
				t.Fatalf("parseRequest(%q): %v, want %v", tt.field, err, tt.wantErr)
			}
			if err != nil {
				if statusOf(err) != 400 {
					t.Errorf("status %d, want 400", statusOf(err))
				}
				return
			}
			if err := checkSpans(&h); err != nil {
				t.Fatal(err)
			}
			if len(h.Fields) != 2 {
				t.Fatalf("%d headers, want 2", len(h.Fields))
			}
			f := h.Fields[1]
			if got := string(f.Value.Of(h.Buf)); got != tt.wantValue {
				t.Errorf("value = %q, want %q", got, tt.wantValue)
			}
			if got := string(f.Line.Of(h.Buf)); got != tt.field {
				t.Errorf("line = %q, want %q", got, tt.field)
			}
			if got, want := string(f.Name.Of(h.Buf)), tt.field[:strings.IndexByte(tt.field, ':')]; got != want {
				t.Errorf("name = %q, want %q", got, want)
			}
		})
	}
}

func TestParseRequestHeaderCount(t *testing.T) {
	for _, tt := range []struct {
		n       int
		wantErr error
	}{
		{0, nil},
		{1, nil},
		{maxHeaders, nil},
		{maxHeaders + 1, errTooManyHeaders},
		{maxHeaders + 50, errTooManyHeaders},
	} {
		t.Run(fmt.Sprint(tt.n), func(t *testing.T) {
			lines := []string{"GET http://h/ HTTP/1.1"}
			for i := range tt.n {
				lines = append(lines, fmt.Sprintf("X-H%d: %d", i, i))
			}
			var h Head
			err := h.ParseRequest(rawHead(lines...))
			if err != tt.wantErr {
				t.Fatalf("parseRequest with %d fields: %v, want %v", tt.n, err, tt.wantErr)
			}
			if err != nil {
				if statusOf(err) != 431 {
					t.Errorf("status %d, want 431", statusOf(err))
				}
				return
			}
			if len(h.Fields) != tt.n {
				t.Errorf("%d headers, want %d", len(h.Fields), tt.n)
			}
		})
	}
}

// TestParseRequestFraming covers the message-length rules, the shapes of
// request smuggling among them.
func TestParseRequestFraming(t *testing.T) {
	tests := []struct {
		name       string
		version    string // HTTP/1.1 when empty
		fields     []string
		wantErr    error
		wantStatus int
		wantCL     int64
		wantChunk  bool
		wantLines  []string // when set, the header lines with drop marks
	}{
		{name: "no body", wantCL: -1},
		{name: "CL", fields: []string{"Content-Length: 5"}, wantCL: 5},
		{name: "CL zero", fields: []string{"Content-Length: 0"}, wantCL: 0},
		{name: "CL OWS", fields: []string{"Content-Length: \t 42 \t"}, wantCL: 42},
		{name: "CL leading zeros", fields: []string{"Content-Length: 007"}, wantCL: 7},
		{name: "CL lower case name", fields: []string{"content-length: 3"}, wantCL: 3},
		{name: "CL 18 digits", fields: []string{"Content-Length: 999999999999999999"}, wantCL: 999999999999999999},
		{name: "CL 19 digits", fields: []string{"Content-Length: 1000000000000000000"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL overflows int64", fields: []string{"Content-Length: 9223372036854775808"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL overflows uint64", fields: []string{"Content-Length: 18446744073709551616"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL plus sign", fields: []string{"Content-Length: +5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL minus sign", fields: []string{"Content-Length: -1"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL inner space", fields: []string{"Content-Length: 5 5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL list", fields: []string{"Content-Length: 5,5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL list OWS", fields: []string{"Content-Length: 5, 5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL list different", fields: []string{"Content-Length: 5, 6"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL hex", fields: []string{"Content-Length: 0x5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL trailing junk", fields: []string{"Content-Length: 5a"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL decimal point", fields: []string{"Content-Length: 5.0"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL empty", fields: []string{"Content-Length:"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL non-ASCII digit", fields: []string{"Content-Length: \xd9\xa5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL NUL", fields: []string{"Content-Length: 5\x00"}, wantErr: errBadHeaderValue, wantStatus: 400},
		{name: "CL space before colon", fields: []string{"Content-Length : 5"}, wantErr: errSpaceColon, wantStatus: 400},
		{name: "CL obs-fold", fields: []string{"Content-Length:", " 5"}, wantErr: errBadCL, wantStatus: 400},
		{name: "CL duplicate different", fields: []string{"Content-Length: 5", "Content-Length: 6"}, wantErr: errDupCL, wantStatus: 400},
		{name: "CL duplicate different case", fields: []string{"Content-Length: 5", "CONTENT-LENGTH: 50"}, wantErr: errDupCL, wantStatus: 400},
		{name: "CL duplicate second bad", fields: []string{"Content-Length: 5", "Content-Length: x"}, wantErr: errBadCL, wantStatus: 400},
		{
			name:   "CL duplicate identical",
			fields: []string{"Content-Length: 5", "X-A: 1", "content-length: 5"},
			wantCL: 5, wantLines: []string{"Host: h", "Content-Length: 5", "X-A: 1", "-content-length: 5"},
		},
		{
			name:   "CL duplicate same value",
			fields: []string{"Content-Length: 5", "Content-Length: 005"},
			wantCL: 5, wantLines: []string{"Host: h", "Content-Length: 5", "-Content-Length: 005"},
		},
		{
			name:   "CL three identical",
			fields: []string{"Content-Length: 1", "Content-Length: 1", "Content-Length: 1"},
			wantCL: 1, wantLines: []string{"Host: h", "Content-Length: 1", "-Content-Length: 1", "-Content-Length: 1"},
		},

		{
			name: "TE chunked", fields: []string{"Transfer-Encoding: chunked"}, wantCL: -1, wantChunk: true,
			wantLines: []string{"Host: h", "Transfer-Encoding: chunked"},
		},
		{name: "TE odd casing", fields: []string{"transfer-encoding: ChUnKeD"}, wantCL: -1, wantChunk: true},
		{name: "TE OWS", fields: []string{"Transfer-Encoding: \tchunked\t "}, wantCL: -1, wantChunk: true},
		{name: "TE chunked twice", fields: []string{"Transfer-Encoding: chunked, chunked"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE chunked twice in two fields", fields: []string{"Transfer-Encoding: chunked", "Transfer-Encoding: chunked"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE gzip then chunked", fields: []string{"Transfer-Encoding: gzip, chunked"}, wantErr: errTEUnsupported, wantStatus: 501},
		{name: "TE gzip then chunked in two fields", fields: []string{"Transfer-Encoding: gzip", "Transfer-Encoding: chunked"}, wantErr: errTEUnsupported, wantStatus: 501},
		{name: "TE chunked then gzip", fields: []string{"Transfer-Encoding: chunked, gzip"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE chunked then gzip in two fields", fields: []string{"Transfer-Encoding: chunked", "Transfer-Encoding: gzip"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE identity", fields: []string{"Transfer-Encoding: identity"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE gzip", fields: []string{"Transfer-Encoding: gzip"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE chunky", fields: []string{"Transfer-Encoding: chunky"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE quoted", fields: []string{`Transfer-Encoding: "chunked"`}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE empty", fields: []string{"Transfer-Encoding:"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE trailing comma", fields: []string{"Transfer-Encoding: chunked,"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE leading comma", fields: []string{"Transfer-Encoding: ,chunked"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE obs-fold", fields: []string{"Transfer-Encoding: gzip", " chunked"}, wantErr: errObsFold, wantStatus: 400},
		{name: "TE obs-fold tab", fields: []string{"Transfer-Encoding: gzip", "\tchunked"}, wantErr: errObsFold, wantStatus: 400},
		// The empty first line is refused before the fold is seen.
		{name: "TE obs-fold empty first line", fields: []string{"Transfer-Encoding:", " chunked"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE obs-fold list", fields: []string{"Transfer-Encoding: gzip,", "\tchunked"}, wantErr: errTENotChunked, wantStatus: 400},
		{name: "TE space before colon", fields: []string{"Transfer-Encoding : chunked"}, wantErr: errSpaceColon, wantStatus: 400},
		{name: "TE vertical tab", fields: []string{"Transfer-Encoding: \x0bchunked"}, wantErr: errBadHeaderValue, wantStatus: 400},
		{name: "TE bare CR", fields: []string{"Transfer-Encoding: chunked\r"}, wantErr: errBareCR, wantStatus: 400},
		{name: "TE in HTTP/1.0", version: "HTTP/1.0", fields: []string{"Transfer-Encoding: chunked"}, wantErr: errTEHTTP10, wantStatus: 400},
		{name: "TE and CL in HTTP/1.0", version: "HTTP/1.0", fields: []string{"Content-Length: 3", "Transfer-Encoding: chunked"}, wantErr: errTEHTTP10, wantStatus: 400},
		{name: "CL then TE", fields: []string{"Content-Length: 3", "Transfer-Encoding: chunked"}, wantErr: errCLAndTE, wantStatus: 400},
		{name: "TE then CL", fields: []string{"Transfer-Encoding: chunked", "Content-Length: 3"}, wantErr: errCLAndTE, wantStatus: 400},
		{name: "TE gzip and CL", fields: []string{"Transfer-Encoding: gzip", "Content-Length: 3"}, wantErr: errCLAndTE, wantStatus: 400},
		{name: "CL zero and TE", fields: []string{"Content-Length: 0", "Transfer-Encoding: chunked"}, wantErr: errCLAndTE, wantStatus: 400},
		{name: "HTTP/1.0 CL", version: "HTTP/1.0", fields: []string{"Content-Length: 9"}, wantCL: 9},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			version := tt.version
			if version == "" {
				version = "HTTP/1.1"
			}
			lines := append([]string{"POST http://h/ " + version, "Host: h"}, tt.fields...)
			var h Head
			err := h.ParseRequest(rawHead(lines...))
			if err != tt.wantErr {
				t.Fatalf("parseRequest(%q): %v, want %v", tt.fields, err, tt.wantErr)
			}
			if got := statusOf(err); got != tt.wantStatus {
				t.Errorf("status %d, want %d", got, tt.wantStatus)
			}
			if err != nil {
				return
			}
			if err := checkSpans(&h); err != nil {
				t.Fatal(err)
			}
			if h.ContentLength != tt.wantCL || h.Chunked != tt.wantChunk {
				t.Errorf("contentLength, chunked = %d, %v; want %d, %v", h.ContentLength, h.Chunked, tt.wantCL, tt.wantChunk)
			}
			if h.TEOther {
				t.Errorf("teOther set on an accepted request")
			}
			if tt.wantLines != nil {
				if diff := cmp.Diff(tt.wantLines, fieldLines(&h)); diff != "" {
					t.Errorf("header lines (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParseRequestConnection(t *testing.T) {
	tests := []struct {
		name          string
		version       string
		fields        []string
		wantErr       error
		wantClose     bool
		wantKeepAlive bool
		wantTokens    []string
		wantLines     []string // after dropConnectionListed
	}{
		{name: "none", fields: []string{"X-A: 1"}, wantLines: []string{"Host: h", "X-A: 1"}},
		{name: "close", fields: []string{"Connection: close"}, wantClose: true, wantLines: []string{"Host: h", "-Connection: close"}},
		{name: "close casing", fields: []string{"connection: CLOSE"}, wantClose: true, wantLines: []string{"Host: h", "-connection: CLOSE"}},
		{
			name: "keep-alive 1.0", version: "HTTP/1.0", fields: []string{"Connection: Keep-Alive", "Keep-Alive: timeout=5"},
			wantKeepAlive: true, wantLines: []string{"Host: h", "-Connection: Keep-Alive", "-Keep-Alive: timeout=5"},
		},
		{
			name: "both and empty elements", fields: []string{"Connection: , keep-alive ,,\tclose ,"},
			wantClose: true, wantKeepAlive: true, wantLines: []string{"Host: h", "-Connection: , keep-alive ,,\tclose ,"},
		},
		{
			name:       "listed names",
			fields:     []string{"Connection: X-Foo, close, x-bar", "X-Foo: 1", "X-Bar: 2", "X-Foobar: 3", "x-foo: 4"},
			wantClose:  true,
			wantTokens: []string{"X-Foo", "x-bar"},
			wantLines:  []string{"Host: h", "-Connection: X-Foo, close, x-bar", "-X-Foo: 1", "-X-Bar: 2", "X-Foobar: 3", "-x-foo: 4"},
		},
		{
			name:          "listed in two fields",
			fields:        []string{"Connection: a", "A: 1", "B: 2", "Connection: b, keep-alive"},
			wantKeepAlive: true,
			wantTokens:    []string{"a", "b"},
			wantLines:     []string{"Host: h", "-Connection: a", "-A: 1", "-B: 2", "-Connection: b, keep-alive"},
		},
		{
			name:          "proxy-connection",
			fields:        []string{"Proxy-Connection: keep-alive, X-P", "X-P: 1"},
			wantKeepAlive: true,
			wantTokens:    []string{"X-P"},
			wantLines:     []string{"Host: h", "-Proxy-Connection: keep-alive, X-P", "-X-P: 1"},
		},
		{
			// Fields the proxy frames the body by, or rewrites, are kept
			// even when listed: dropping Content-Length or
			// Transfer-Encoding would send the body unframed upstream.
			name:       "framing fields listed",
			fields:     []string{"Connection: Content-Length, Transfer-Encoding, Host, X-A", "Content-Length: 4", "X-A: 1"},
			wantTokens: []string{"Content-Length", "Transfer-Encoding", "Host", "X-A"},
			wantLines:  []string{"Host: h", "-Connection: Content-Length, Transfer-Encoding, Host, X-A", "Content-Length: 4", "-X-A: 1"},
		},
		{
			name:       "max options",
			fields:     []string{"Connection: a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,close"},
			wantClose:  true,
			wantTokens: strings.Split("a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", ","),
			wantLines:  []string{"Host: h", "-Connection: a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,close"},
		},
		{name: "too many options", fields: []string{"Connection: a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"}, wantErr: errTooManyConnOpts},
		{name: "too many options in two fields", fields: []string{"Connection: a,b,c,d,e,f,g,h", "Proxy-Connection: i,j,k,l,m,n,o,p,q"}, wantErr: errTooManyConnOpts},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			version := tt.version
			if version == "" {
				version = "HTTP/1.1"
			}
			var h Head
			err := h.ParseRequest(rawHead(append([]string{"GET http://h/ " + version, "Host: h"}, tt.fields...)...))
			if err != tt.wantErr {
				t.Fatalf("parseRequest: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if statusOf(err) != 400 {
					t.Errorf("status %d, want 400", statusOf(err))
				}
				return
			}
			if h.ConnClose != tt.wantClose || h.ConnKeepAlive != tt.wantKeepAlive {
				t.Errorf("connClose, connKeepAlive = %v, %v; want %v, %v", h.ConnClose, h.ConnKeepAlive, tt.wantClose, tt.wantKeepAlive)
			}
			if diff := cmp.Diff(tt.wantTokens, connTokens(&h)); diff != "" {
				t.Errorf("connection tokens (-want +got):\n%s", diff)
			}
			if err := checkSpans(&h); err != nil {
				t.Fatal(err)
			}
			h.DropConnectionListed()
			if diff := cmp.Diff(tt.wantLines, fieldLines(&h)); diff != "" {
				t.Errorf("header lines after dropConnectionListed (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseRequestHopByHop(t *testing.T) {
	var h Head
	b := rawHead("GET http://example.com/ HTTP/1.1",
		"Host: example.com",
		"User-Agent: t",
		"Connection: keep-alive",
		"Keep-Alive: timeout=5",
		"Proxy-Connection: keep-alive",
		"Proxy-Authorization: Basic dXNlcjpwYXNz ",
		"TE: trailers",
		"Trailer: X-Sum",
		"Upgrade: websocket",
		"Proxy-Authenticate: Basic realm=x",
		"X-TE: 1",
		"Trailers: 1",
		"Upgrade-Insecure-Requests: 1",
		"Proxy-Authorization-X: 1",
		"Accept: */*",
		"Expect: 100-continue",
		"Cookie: a=b",
	)
	if err := h.ParseRequest(b); err != nil {
		t.Fatalf("parseRequest: %v", err)
	}
	want := []string{
		"Host: example.com",
		"User-Agent: t",
		"-Connection: keep-alive",
		"-Keep-Alive: timeout=5",
		"-Proxy-Connection: keep-alive",
		"-Proxy-Authorization: Basic dXNlcjpwYXNz ",
		"-TE: trailers",
		"-Trailer: X-Sum",
		"-Upgrade: websocket",
		"-Proxy-Authenticate: Basic realm=x",
		"X-TE: 1",
		"Trailers: 1",
		"Upgrade-Insecure-Requests: 1",
		"Proxy-Authorization-X: 1",
		"Accept: */*",
		"Expect: 100-continue",
		"Cookie: a=b",
	}
	if diff := cmp.Diff(want, fieldLines(&h)); diff != "" {
		t.Errorf("header lines (-want +got):\n%s", diff)
	}
	if got := string(h.ProxyAuth.Of(h.Buf)); got != "Basic dXNlcjpwYXNz" {
		t.Errorf("proxyAuth = %q, want the trimmed value", got)
	}
	if h.HostIdx != 0 {
		t.Errorf("hostIdx = %d, want 0", h.HostIdx)
	}
	if !h.ExpectContinue {
		t.Error("expectContinue not set")
	}
	if h.FieldIndex("cookie") != 16 || h.FieldIndex("x-absent") != -1 {
		t.Errorf("fieldIndex(cookie), fieldIndex(x-absent) = %d, %d; want 16, -1", h.FieldIndex("cookie"), h.FieldIndex("x-absent"))
	}
	if err := checkSpans(&h); err != nil {
		t.Error(err)
	}
}

func TestParseRequestProxyAuth(t *testing.T) {
	tests := []struct {
		name   string
		fields []string
		want   string
	}{
		{"absent", []string{"Authorization: Basic x"}, ""},
		{"casing", []string{"proxy-AUTHORIZATION:Basic abc"}, "Basic abc"},
		{"empty", []string{"Proxy-Authorization:  "}, ""},
		{"last wins", []string{"Proxy-Authorization: Basic a", "Proxy-Authorization: Basic b"}, "Basic b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Head
			if err := h.ParseRequest(rawHead(append([]string{"GET http://h/ HTTP/1.1"}, tt.fields...)...)); err != nil {
				t.Fatalf("parseRequest: %v", err)
			}
			if got := string(h.ProxyAuth.Of(h.Buf)); got != tt.want {
				t.Errorf("proxyAuth = %q, want %q", got, tt.want)
			}
			if h.ProxyAuth.Empty() != (tt.want == "") {
				t.Errorf("proxyAuth.empty() = %v", h.ProxyAuth.Empty())
			}
		})
	}
}

func TestParseRequestHost(t *testing.T) {
	tests := []struct {
		name    string
		fields  []string
		wantErr error
		wantIdx int
	}{
		{"absent", []string{"X-A: 1"}, nil, -1},
		{"first", []string{"Host: h", "X-A: 1"}, nil, 0},
		{"third", []string{"X-A: 1", "X-B: 2", "host: h"}, nil, 2},
		{"empty value", []string{"Host:"}, nil, 0},
		{"Hosts is another field", []string{"Hosts: a", "Host: h"}, nil, 1},
		{"duplicate", []string{"Host: a", "Host: b"}, errDupHost, 0},
		{"duplicate identical", []string{"Host: a", "X: 1", "host: a"}, errDupHost, 0},
		{"duplicate casing", []string{"HOST: a", "hOsT: a"}, errDupHost, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Head
			err := h.ParseRequest(rawHead(append([]string{"GET http://h/ HTTP/1.1"}, tt.fields...)...))
			if err != tt.wantErr {
				t.Fatalf("parseRequest: %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				if statusOf(err) != 400 {
					t.Errorf("status %d, want 400", statusOf(err))
				}
				return
			}
			if h.HostIdx != tt.wantIdx {
				t.Errorf("hostIdx = %d, want %d", h.HostIdx, tt.wantIdx)
			}
		})
	}
}

func TestParseRequestExpect(t *testing.T) {
	for _, tt := range []struct {
		field string
		want  bool
	}{
		{"", false},
		{"Expect: 100-continue", true},
		{"expect: 100-Continue", true},
		{"Expect:\t100-continue\t", true},
		{"Expect: 200-ok", false},
		{"Expect: 100-continue, x", false},
		{"Expects: 100-continue", false},
	} {
		t.Run(tt.field, func(t *testing.T) {
			lines := []string{"PUT http://h/ HTTP/1.1", "Content-Length: 1"}
			if tt.field != "" {
				lines = append(lines, tt.field)
			}
			var h Head
			if err := h.ParseRequest(rawHead(lines...)); err != nil {
				t.Fatalf("parseRequest: %v", err)
			}
			if h.ExpectContinue != tt.want {
				t.Errorf("expectContinue = %v, want %v", h.ExpectContinue, tt.want)
			}
		})
	}
}

// TestParseRequestReuse parses heads one after another into one head, as
// a connection does, and checks nothing leaks from one to the next.
func TestParseRequestReuse(t *testing.T) {
	var h Head
	first := rawHead("POST http://a/ HTTP/1.0",
		"Host: a", "Content-Length: 10", "Connection: keep-alive, X-A", "Expect: 100-continue",
		"Proxy-Authorization: Basic x", "X-A: 1")
	if err := h.ParseRequest(first); err != nil {
		t.Fatalf("parseRequest(first): %v", err)
	}
	second := rawHead("GET http://b/ HTTP/1.1", "Transfer-Encoding: chunked")
	if err := h.ParseRequest(second); err != nil {
		t.Fatalf("parseRequest(second): %v", err)
	}
	if h.ContentLength != -1 || !h.Chunked || h.Minor != 1 || h.ConnKeepAlive || h.ConnClose ||
		h.nConnTokens != 0 || h.ExpectContinue || h.HostIdx != -1 || !h.ProxyAuth.Empty() || len(h.Fields) != 1 {
		t.Errorf("state carried over: %+v", h)
	}
	// A refused head leaves nothing of the previous one either.
	if err := h.ParseRequest(rawHead("GET http://c/ HTTP/1.1", "Host: c", "Host: c")); err != errDupHost {
		t.Fatalf("parseRequest(third): %v, want %v", err, errDupHost)
	}
	if err := h.ParseRequest(rawHead("GET http://d/ HTTP/1.1")); err != nil {
		t.Fatalf("parseRequest(fourth): %v", err)
	}
	if h.HostIdx != -1 || h.Chunked || len(h.Fields) != 0 {
		t.Errorf("state carried over: %+v", h)
	}
}

func TestParseResponseStatusLine(t *testing.T) {
	tests := []struct {
		line       string
		wantErr    error
		wantStatus int
		wantMinor  int
		wantReason string
	}{
		{"HTTP/1.1 200 OK", nil, 200, 1, "OK"},
		{"HTTP/1.0 404 Not Found", nil, 404, 0, "Not Found"},
		{"HTTP/1.1 200 ", nil, 200, 1, ""},
		{"HTTP/1.1 200", nil, 200, 1, ""},
		{"HTTP/1.1 599 x", nil, 599, 1, "x"},
		{"HTTP/1.1 100 Continue", nil, 100, 1, "Continue"},
		{"HTTP/1.1 301  two  spaces ", nil, 301, 1, " two  spaces "},
		{"HTTP/1.1 200 \tOK\xe2\x9c\x93", nil, 200, 1, "\tOK\xe2\x9c\x93"},
		{"HTTP/1.1 200OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 2000 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 20 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 20", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 099 x", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 600 x", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 2x0 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 abc OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 -20 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1  200 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1\t200 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/2.0 200 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/0.9 200 OK", ErrBadStatusLine, 0, 0, ""},
		{"http/1.1 200 OK", ErrBadStatusLine, 0, 0, ""},
		{"ICY 200 OK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 200 O\x7fK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 200 O\x00K", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 200 O\rK", ErrBadStatusLine, 0, 0, ""},
		{"HTTP/1.1 200 OK\n", ErrBadStatusLine, 0, 0, ""},
		{"", ErrBadStatusLine, 0, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.line, func(t *testing.T) {
			var h Head
			err := h.ParseResponse(rawHead(tt.line, "Content-Length: 0"))
			if err != tt.wantErr {
				t.Fatalf("parseResponse(%q): %v, want %v", tt.line, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if h.Status != tt.wantStatus || h.Minor != tt.wantMinor {
				t.Errorf("status, minor = %d, %d; want %d, %d", h.Status, h.Minor, tt.wantStatus, tt.wantMinor)
			}
			if got := string(h.Reason.Of(h.Buf)); got != tt.wantReason {
				t.Errorf("reason = %q, want %q", got, tt.wantReason)
			}
			if err := checkSpans(&h); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestParseResponseFraming(t *testing.T) {
	tests := []struct {
		name      string
		line      string // HTTP/1.1 200 OK when empty
		fields    []string
		wantErr   error
		wantCL    int64
		wantChunk bool
		wantOther bool
		wantLines []string
	}{
		{name: "close-delimited", wantCL: -1},
		{name: "CL", fields: []string{"Content-Length: 12"}, wantCL: 12},
		{name: "chunked", fields: []string{"Transfer-Encoding: chunked"}, wantCL: -1, wantChunk: true},
		{name: "chunked casing", fields: []string{"TRANSFER-ENCODING: Chunked"}, wantCL: -1, wantChunk: true},
		{
			name: "TE overrides CL", fields: []string{"Content-Length: 7", "Transfer-Encoding: chunked", "Content-Length: 7"},
			wantCL: -1, wantChunk: true,
			wantLines: []string{"-Content-Length: 7", "Transfer-Encoding: chunked", "-Content-Length: 7"},
		},
		{
			name: "TE before CL", fields: []string{"Transfer-Encoding: chunked", "content-length: 3"},
			wantCL: -1, wantChunk: true,
			wantLines: []string{"Transfer-Encoding: chunked", "-content-length: 3"},
		},
		{
			name: "TE gzip is close-delimited", fields: []string{"Transfer-Encoding: gzip", "Content-Length: 3"},
			wantCL: -1, wantOther: true,
			wantLines: []string{"Transfer-Encoding: gzip", "-Content-Length: 3"},
		},
		// A response is framed one way only (issue 15: response
		// splitting): by its chunks when chunked is the final coding,
		// whatever comes before it (the other codings are passed on, not
		// decoded); by close otherwise.
		{name: "TE gzip then chunked", fields: []string{"Transfer-Encoding: gzip, chunked"}, wantCL: -1, wantChunk: true, wantOther: true},
		{
			name: "TE identity then chunked in two fields", fields: []string{"Transfer-Encoding: identity", "Transfer-Encoding: chunked"},
			wantCL: -1, wantChunk: true, wantOther: true,
		},
		{name: "TE identity", fields: []string{"Transfer-Encoding: identity"}, wantCL: -1, wantOther: true},
		// Transfer-Encoding in an HTTP/1.0 response is faulty framing.
		{name: "HTTP/1.0 with TE", line: "HTTP/1.0 200 OK", fields: []string{"Transfer-Encoding: chunked"}, wantErr: ErrBadResponseHead},
		{
			name: "HTTP/1.0 with TE and CL", line: "HTTP/1.0 200 OK",
			fields: []string{"Content-Length: 5", "Transfer-Encoding: chunked"}, wantErr: ErrBadResponseHead,
		},
		{name: "HTTP/1.0 CL", line: "HTTP/1.0 200 OK", fields: []string{"Content-Length: 5"}, wantCL: 5},
		{
			name: "CL duplicate identical", fields: []string{"Content-Length: 5", "Content-Length: 5"}, wantCL: 5,
			wantLines: []string{"Content-Length: 5", "-Content-Length: 5"},
		},
		{name: "1xx", line: "HTTP/1.1 100 Continue", wantCL: -1},
		{
			name: "101", line: "HTTP/1.1 101 Switching Protocols", fields: []string{"Upgrade: websocket", "Connection: Upgrade"},
			wantCL: -1, wantLines: []string{"-Upgrade: websocket", "-Connection: Upgrade"},
		},
		{name: "204", line: "HTTP/1.1 204 No Content", wantCL: -1},
		{name: "304 with CL", line: "HTTP/1.1 304 Not Modified", fields: []string{"Content-Length: 100"}, wantCL: 100},
		{name: "Proxy-Authenticate dropped", line: "HTTP/1.1 407 x", fields: []string{"Proxy-Authenticate: Basic"}, wantCL: -1, wantLines: []string{"-Proxy-Authenticate: Basic"}},
		{name: "CL duplicate different", fields: []string{"Content-Length: 5", "Content-Length: 6"}, wantErr: ErrBadResponseHead},
		{name: "CL bad", fields: []string{"Content-Length: -1"}, wantErr: ErrBadResponseHead},
		{name: "CL list", fields: []string{"Content-Length: 5, 5"}, wantErr: ErrBadResponseHead},
		{name: "TE chunked then gzip", fields: []string{"Transfer-Encoding: chunked, gzip"}, wantErr: ErrBadResponseHead},
		{name: "TE chunked twice", fields: []string{"Transfer-Encoding: chunked", "Transfer-Encoding: chunked"}, wantErr: ErrBadResponseHead},
		{name: "TE empty", fields: []string{"Transfer-Encoding: "}, wantErr: ErrBadResponseHead},
		{name: "obs-fold", fields: []string{"X-A: 1", " 2"}, wantErr: ErrBadResponseHead},
		{name: "space before colon", fields: []string{"Content-Length : 1"}, wantErr: ErrBadResponseHead},
		{name: "NUL in value", fields: []string{"X-A: \x00"}, wantErr: ErrBadResponseHead},
		{name: "bare LF", fields: []string{"X-A: 1\nX-B: 2"}, wantErr: ErrBadResponseHead},
		{name: "bare CR", fields: []string{"X-A: 1\rX-B: 2"}, wantErr: ErrBadResponseHead},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := tt.line
			if line == "" {
				line = "HTTP/1.1 200 OK"
			}
			var h Head
			err := h.ParseResponse(rawHead(append([]string{line}, tt.fields...)...))
			if err != tt.wantErr {
				t.Fatalf("parseResponse(%q): %v, want %v", tt.fields, err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if err := checkSpans(&h); err != nil {
				t.Fatal(err)
			}
			if h.ContentLength != tt.wantCL || h.Chunked != tt.wantChunk || h.TEOther != tt.wantOther {
				t.Errorf("contentLength, chunked, teOther = %d, %v, %v; want %d, %v, %v",
					h.ContentLength, h.Chunked, h.TEOther, tt.wantCL, tt.wantChunk, tt.wantOther)
			}
			if tt.wantLines != nil {
				if diff := cmp.Diff(tt.wantLines, fieldLines(&h)); diff != "" {
					t.Errorf("header lines (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestParseResponseHeaderCount(t *testing.T) {
	lines := []string{"HTTP/1.1 200 OK"}
	for i := range maxHeaders + 1 {
		lines = append(lines, fmt.Sprintf("X-%d: v", i))
	}
	var h Head
	if err := h.ParseResponse(rawHead(lines[:maxHeaders+1]...)); err != nil {
		t.Fatalf("parseResponse with %d fields: %v", maxHeaders, err)
	}
	if err := h.ParseResponse(rawHead(lines...)); err != ErrBadResponseHead {
		t.Fatalf("parseResponse with %d fields: %v, want %v", maxHeaders+1, err, ErrBadResponseHead)
	}
}

func TestParseResponseConnection(t *testing.T) {
	var h Head
	b := rawHead("HTTP/1.1 200 OK", "Connection: close, X-Hop", "X-Hop: 1", "Keep-Alive: timeout=1",
		"Transfer-Encoding: chunked", "Content-Type: text/plain")
	if err := h.ParseResponse(b); err != nil {
		t.Fatalf("parseResponse: %v", err)
	}
	if !h.ConnClose || h.ConnKeepAlive {
		t.Errorf("connClose, connKeepAlive = %v, %v; want true, false", h.ConnClose, h.ConnKeepAlive)
	}
	h.DropConnectionListed()
	want := []string{"-Connection: close, X-Hop", "-X-Hop: 1", "-Keep-Alive: timeout=1", "Transfer-Encoding: chunked", "Content-Type: text/plain"}
	if diff := cmp.Diff(want, fieldLines(&h)); diff != "" {
		t.Errorf("header lines (-want +got):\n%s", diff)
	}
}

func TestFindHeadEnd(t *testing.T) {
	tests := []struct {
		in   string
		from int
		want int
	}{
		{"", 0, -1},
		{"GET / HTTP/1.1\r\n", 0, -1},
		{"GET / HTTP/1.1\r\n\r\n", 0, 18},
		{"GET / HTTP/1.1\r\n\r\nbody\r\n\r\n", 0, 18},
		{"GET / HTTP/1.1\r\n\r\n", -3, 18},
		{"GET / HTTP/1.1\r\n\r\n", 14, 18},
		{"GET / HTTP/1.1\n\n", 0, -1},
		{"GET / HTTP/1.1\r\n\r\r\n\r\n", 0, 21},
	}
	for _, tt := range tests {
		if got := findHeadEnd([]byte(tt.in), tt.from); got != tt.want {
			t.Errorf("findHeadEnd(%q, %d) = %d, want %d", tt.in, tt.from, got, tt.want)
		}
	}
}

// TestReadHeadLeadingEmptyLines checks that empty lines before a request
// head are skipped (RFC 9112 §2.2) before the head reaches parseRequest.
// The heads are already buffered, so readHead never touches the socket.
func TestReadHeadLeadingEmptyLines(t *testing.T) {
	for _, tt := range []struct{ name, in string }{
		{"none", "GET http://h/ HTTP/1.1\r\n\r\n"},
		{"one", "\r\nGET http://h/ HTTP/1.1\r\n\r\n"},
		{"several", "\r\n\r\n\r\nGET http://h/ HTTP/1.1\r\n\r\n"},
		{"bare LF", "\nGET http://h/ HTTP/1.1\r\n\r\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := Conn{Buf: []byte(tt.in + "rest")}
			b.W = len(tt.in) + len("rest")
			n, err := b.ReadHead(1<<10, time.Second)
			if err != nil {
				t.Fatalf("readHead: %v", err)
			}
			got := b.Buf[b.R : b.R+n]
			if string(got) != "GET http://h/ HTTP/1.1\r\n\r\n" {
				t.Fatalf("head = %q", got)
			}
			var h Head
			if err := h.ParseRequest(got); err != nil {
				t.Fatalf("parseRequest: %v", err)
			}
		})
	}
}

// TestReadHeadTLSHandshake checks that a message starting with a TLS
// handshake record is refused with ErrTLSHandshake as soon as its first
// byte is in: the peer, which sends the rest of its ClientHello and waits
// for an answer, is not left waiting for a head that never ends.
func TestReadHeadTLSHandshake(t *testing.T) {
	for _, tt := range []struct {
		name, in string
		want     error
	}{
		{"first byte alone", "\x16", ErrTLSHandshake},
		{"record header", "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", ErrTLSHandshake},
		{"after empty lines", "\r\n\x16\x03\x01", ErrTLSHandshake},
	} {
		t.Run(tt.name, func(t *testing.T) {
			client, server := net.Pipe()
			t.Cleanup(func() { client.Close(); server.Close() })
			go client.Write([]byte(tt.in)) // and no more: the pipe stays open
			var b Conn
			b.Attach(server, &ClientBufs)
			defer b.Release()
			// The deadline is far: a ReadHead that waited for the
			// rest of the head would return at it, 20 s on; one that
			// refuses at once takes far less than 10 s however
			// loaded the machine.
			b.ArmReadDeadline(MonoNow(), 20*time.Second)
			start := time.Now()
			_, err := b.ReadHead(1<<10, 20*time.Second)
			if err != tt.want {
				t.Fatalf("ReadHead: %v, want %v", err, tt.want)
			}
			if took := time.Since(start); took > 10*time.Second {
				t.Errorf("ReadHead returned after %v, not at once", took)
			}
		})
	}
	// Inside a head the byte is no start of a message: the head goes on.
	b := Conn{Buf: []byte("GET http://h/\x16 HTTP/1.1\r\n\r\n")}
	b.W = len(b.Buf)
	if n, err := b.ReadHead(1<<10, time.Second); err != nil || n != b.W {
		t.Errorf("a head with 0x16 inside: %d %v", n, err)
	}
}

// browserRequest is a realistic head as Chrome sends it through a proxy.
var browserRequest = rawHead(
	"GET http://www.example.com/articles/2024/some-page.html?utm_source=feed&id=12345 HTTP/1.1",
	"Host: www.example.com",
	"Proxy-Connection: keep-alive",
	"Upgrade-Insecure-Requests: 1",
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/126.0.0.0 Safari/537.36",
	"Accept: text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,image/apng,*/*;q=0.8",
	"Accept-Encoding: gzip, deflate",
	"Accept-Language: en-US,en;q=0.9,de;q=0.8",
	"Cookie: session=3f2a9c1e8b7d4f6a; prefs=dark; _ga=GA1.2.1234567890.1700000000",
	"Proxy-Authorization: Basic dXNlcjpwYXNzd29yZA==",
	"If-Modified-Since: Tue, 02 Jul 2024 10:00:00 GMT",
)

var sampleResponse = rawHead(
	"HTTP/1.1 200 OK",
	"Date: Tue, 02 Jul 2024 10:00:00 GMT",
	"Server: nginx/1.25.3",
	"Content-Type: text/html; charset=utf-8",
	"Content-Length: 10240",
	"Connection: keep-alive",
	"Cache-Control: max-age=600",
	"ETag: \"66a1b2c3-2800\"",
)

func BenchmarkParseRequest(b *testing.B) {
	var h Head
	b.ReportAllocs()
	b.SetBytes(int64(len(browserRequest)))
	for b.Loop() {
		if err := h.ParseRequest(browserRequest); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseResponse(b *testing.B) {
	var h Head
	b.ReportAllocs()
	b.SetBytes(int64(len(sampleResponse)))
	for b.Loop() {
		if err := h.ParseResponse(sampleResponse); err != nil {
			b.Fatal(err)
		}
	}
}

// TestParseAllocs checks that the parsers allocate nothing once their
// state has been used: the hot path of every request.
func TestParseAllocs(t *testing.T) {
	var h Head
	connReq := rawHead("POST http://h/ HTTP/1.1", "Host: h", "Connection: X-A, close", "X-A: 1", "Transfer-Encoding: chunked")
	badReq := rawHead("GET http://h/ HTTP/1.1", "Content-Length: 1", "Content-Length: 2")
	body := []byte("4;ext=1\r\nWiki\r\n5\r\npedia\r\n0\r\nX-Sum: 1\r\n\r\n")
	var cs ChunkedScanner
	tests := []struct {
		name string
		f    func()
	}{
		{"parseRequest", func() {
			if err := h.ParseRequest(browserRequest); err != nil {
				t.Fatal(err)
			}
		}},
		{"parseRequest connection options", func() {
			if err := h.ParseRequest(connReq); err != nil {
				t.Fatal(err)
			}
			h.DropConnectionListed()
		}},
		{"parseRequest refused", func() {
			if err := h.ParseRequest(badReq); err != errDupCL {
				t.Fatal(err)
			}
		}},
		{"parseResponse", func() {
			if err := h.ParseResponse(sampleResponse); err != nil {
				t.Fatal(err)
			}
		}},
		{"chunkedScanner", func() {
			cs = ChunkedScanner{}
			if n, _, err := ScanChunked(&cs, body); err != nil || n != len(body) || !cs.Done() {
				t.Fatalf("scanChunked = %d, %v, done %v", n, err, cs.Done())
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if n := testing.AllocsPerRun(100, tt.f); n != 0 {
				t.Errorf("%s: %v allocs per run, want 0", tt.name, n)
			}
		})
	}
}

// TestParseErrorFraming checks which refusals say the request's framing
// was refused (the smuggling shapes) and which do not.
func TestParseErrorFraming(t *testing.T) {
	tests := []struct {
		name    string
		fields  []string
		framing bool
	}{
		{"CL and TE", []string{"Content-Length: 3", "Transfer-Encoding: chunked"}, true},
		{"CL duplicate different", []string{"Content-Length: 5", "Content-Length: 6"}, true},
		{"CL list", []string{"Content-Length: 5, 5"}, true},
		{"CL signed", []string{"Content-Length: +5"}, true},
		{"TE chunked not last", []string{"Transfer-Encoding: chunked, gzip"}, true},
		{"TE gzip", []string{"Transfer-Encoding: gzip"}, true},
		{"TE obs-fold", []string{"Transfer-Encoding: gzip", " chunked"}, true},
		{"obs-fold elsewhere", []string{"X-A: a", " b"}, true},
		{"TE space before colon", []string{"Transfer-Encoding : chunked"}, true},
		{"tab before colon", []string{"X-A\t: b"}, true},
		{"space in name", []string{"X A: b"}, false},
		{"NUL in value", []string{"X-A: a\x00b"}, false},
		{"TE gzip, chunked", []string{"Transfer-Encoding: gzip, chunked"}, false},
		{"duplicate Host", []string{"Host: h"}, false},
		{"too many headers", slices.Repeat([]string{"X-A: b"}, maxHeaders), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Head
			err := h.ParseRequest(rawHead(append([]string{"POST http://h/ HTTP/1.1", "Host: h"}, tt.fields...)...))
			var pe *ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseRequest: %v, want a *ParseError", err)
			}
			if pe.Framing != tt.framing {
				t.Errorf("%v: Framing %v, want %v", err, pe.Framing, tt.framing)
			}
		})
	}
	var h Head
	if err := h.ParseRequest(rawHead("POST http://h/ HTTP/1.0", "Transfer-Encoding: chunked")); err != errTEHTTP10 || !err.(*ParseError).Framing {
		t.Errorf("TE in HTTP/1.0: %v, want a framing refusal", err)
	}
}

// TestParseRequestLinePartial checks that the request line of a head not
// yet whole is parsed, and that nothing of its fields is.
func TestParseRequestLinePartial(t *testing.T) {
	tests := []struct {
		name, b        string
		method, target string // "" = not parsed
	}{
		{"line and part of a field", "GET http://h/a HTTP/1.1\r\nX-Secret: hunter", "GET", "http://h/a"},
		{"line only", "CONNECT h:443 HTTP/1.1\r\n", "CONNECT", "h:443"},
		{"line not ended", "GET http://h/a HTTP/1.1", "", ""},
		{"bad version", "GET http://h/a HTTP/2.0\r\nX: y", "", ""},
		{"bad method", "G(T http://h/a HTTP/1.1\r\n", "", ""},
		{"empty", "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Head
			_, err := h.ParseRequestLine([]byte(tt.b))
			if (err == nil) != (tt.method != "") {
				t.Fatalf("ParseRequestLine(%q): %v", tt.b, err)
			}
			if m, tg := string(h.Method.Of(h.Buf)), string(h.Target.Of(h.Buf)); m != tt.method || tg != tt.target {
				t.Errorf("method %q, target %q; want %q, %q", m, tg, tt.method, tt.target)
			}
			if len(h.Fields) != 0 {
				t.Errorf("%d fields parsed, want none", len(h.Fields))
			}
		})
	}
}
