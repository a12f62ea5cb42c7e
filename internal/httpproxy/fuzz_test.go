package httpproxy

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"testing"
)

// checkAcceptedHead checks the invariants of a head the parser accepted.
func checkAcceptedHead(t *testing.T, h *head, b []byte) {
	t.Helper()
	if len(h.buf) != len(b) {
		t.Fatalf("head buffer is %d bytes, input %d", len(h.buf), len(b))
	}
	if err := checkSpans(h); err != nil {
		t.Fatal(err)
	}
	if h.contentLength < -1 {
		t.Fatalf("contentLength = %d", h.contentLength)
	}
	if h.chunked && h.contentLength >= 0 {
		t.Fatalf("both chunked and contentLength %d", h.contentLength)
	}
	if h.chunked && h.teOther {
		t.Fatal("both chunked and teOther")
	}
	if h.minor < 0 || h.minor > 9 {
		t.Fatalf("minor = %d", h.minor)
	}
	h.dropConnectionListed()
	for _, f := range h.headers {
		if f.drop {
			continue
		}
		// Whatever Connection lists, the body's framing goes out with it.
		name := f.name.of(h.buf)
		if equalFold(name, "connection") || equalFold(name, "proxy-connection") || equalFold(name, "proxy-authorization") {
			t.Fatalf("hop-by-hop field %q not dropped", name)
		}
	}
	if h.contentLength >= 0 && !h.teOther {
		if i := h.fieldIndex("content-length"); i < 0 || h.headers[i].drop {
			t.Fatalf("contentLength %d but its first field is dropped or gone", h.contentLength)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(browserRequest)
	f.Fuzz(func(t *testing.T, data []byte) {
		var h head
		inputs := [][]byte{data}
		if n := findHeadEnd(data, 0); n > 0 && n < len(data) {
			inputs = append(inputs, data[:n])
		}
		for _, b := range inputs {
			err := h.parseRequest(b)
			if err != nil {
				// Every refusal is answered: it carries its status.
				switch statusOf(err) {
				case 400, 431, 501, 505:
				default:
					t.Fatalf("parseRequest error %v has status %d", err, statusOf(err))
				}
				continue
			}
			if h.teOther {
				t.Fatal("teOther set on an accepted request")
			}
			if h.method.empty() || h.target.empty() {
				t.Fatal("accepted request without method or target")
			}
			checkAcceptedHead(t, &h, b)
			if findHeadEnd(b, 0) == len(b) {
				compareWithNetHTTP(t, &h, b)
			}
		}
	})
}

// compareWithNetHTTP checks that, where net/http also accepts a request
// head, both agree on how its body is framed: a disagreement between two
// HTTP implementations is what request smuggling is made of.
func compareWithNetHTTP(t *testing.T, h *head, b []byte) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return
	}
	goChunked := len(req.TransferEncoding) > 0 && req.TransferEncoding[len(req.TransferEncoding)-1] == "chunked"
	if goChunked != h.chunked {
		t.Fatalf("chunked = %v, net/http says %v (TE %q)", h.chunked, goChunked, req.TransferEncoding)
	}
	if !goChunked {
		cl := max(h.contentLength, 0)
		if cl != req.ContentLength {
			t.Fatalf("body length %d, net/http says %d", cl, req.ContentLength)
		}
	}
}

func FuzzParseResponse(f *testing.F) {
	f.Add(sampleResponse)
	f.Fuzz(func(t *testing.T, data []byte) {
		var h head
		inputs := [][]byte{data}
		if n := findHeadEnd(data, 0); n > 0 && n < len(data) {
			inputs = append(inputs, data[:n])
		}
		for _, b := range inputs {
			err := h.parseResponse(b)
			if err != nil {
				// An upstream's fault is never mistaken for the client's.
				if err != errBadStatusLine && err != errBadResponseHead {
					t.Fatalf("parseResponse error %v, want errBadStatusLine or errBadResponseHead", err)
				}
				continue
			}
			if h.status < 100 || h.status > 599 {
				t.Fatalf("status = %d", h.status)
			}
			if h.minor == 0 && h.chunked {
				t.Fatal("HTTP/1.0 response read as chunked")
			}
			checkAcceptedHead(t, &h, b)
		}
	})
}

func FuzzChunked(f *testing.F) {
	f.Add([]byte("4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\n"), uint16(3), uint16(11))
	f.Fuzz(func(t *testing.T, data []byte, a, b uint16) {
		whole, err := feedChunked(data, nil)
		if err != nil {
			t.Fatal(err)
		}
		cuts := []int{int(a) % (len(data) + 1), int(b) % (len(data) + 1)}
		if cuts[0] > cuts[1] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		split, err := feedChunked(data, cuts)
		if err != nil {
			t.Fatal(err)
		}
		if split.err != whole.err || split.consumed != whole.consumed || split.done != whole.done {
			t.Fatalf("split at %v: err %v, consumed %d, done %v; whole: %v, %d, %v",
				cuts, split.err, split.consumed, split.done, whole.err, whole.consumed, whole.done)
		}
		if !bytes.Equal(split.payload, whole.payload) {
			t.Fatalf("split at %v: payload %q, whole %q", cuts, split.payload, whole.payload)
		}
		if !bytes.Equal(whole.runs, data[:whole.consumed]) {
			t.Fatal("runs concatenated differ from the input")
		}
		if whole.err == nil && !whole.done && whole.consumed != len(data) {
			t.Fatalf("consumed %d of %d bytes without an end or an error", whole.consumed, len(data))
		}
		if !whole.done {
			return
		}
		// Where net/http also decodes the body, both read the same data.
		got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(data[:whole.consumed])))
		if err == nil && !bytes.Equal(got, whole.payload) {
			t.Fatalf("payload %q, net/http decodes %q", whole.payload, got)
		}
	})
}

func FuzzTarget(f *testing.F) {
	f.Add([]byte("http://example.com:8080/p?q"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tg target
		if err := parseAbsoluteTarget(data, &tg); err == nil {
			checkTarget(t, &tg)
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
			checkTarget(t, &tg)
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
func checkTarget(t *testing.T, tg *target) {
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
	addr := appendHostPort(nil, tg)
	var back target
	if err := parseAuthorityForm(addr, &back); err != nil {
		t.Fatalf("dial address %q does not parse: %v", addr, err)
	}
	if !bytes.Equal(back.host, bytes.ToLower(tg.host)) || back.port != tg.port || back.ipv6 != tg.ipv6 {
		t.Fatalf("dial address %q reads back as %q %d", addr, back.host, back.port)
	}
}

// TestParseFuzzHelpers makes sure the fuzz checks can fail: a broken head and
// a broken target are caught.
func TestParseFuzzHelpers(t *testing.T) {
	var h head
	if err := h.parseRequest(rawHead("GET http://h/ HTTP/1.1", "Host: h")); err != nil {
		t.Fatal(err)
	}
	h.headers[0].value.end = int32(len(h.buf) + 1)
	if checkSpans(&h) == nil {
		t.Error("checkSpans passed a span past the buffer")
	}
	h.headers[0].value = span{3, 2}
	if checkSpans(&h) == nil {
		t.Error("checkSpans passed a reversed span")
	}
	if _, err := feedChunked([]byte("0\r\n\r\n"), []int{3, 1}); err == nil {
		t.Error("feedChunked took descending cuts")
	}
}
