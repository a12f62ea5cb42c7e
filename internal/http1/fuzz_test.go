package http1

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"net/http/httputil"
	"testing"
)

// checkAcceptedHead checks the invariants of a head the parser accepted.
func checkAcceptedHead(t *testing.T, h *Head, b []byte) {
	t.Helper()
	if len(h.Buf) != len(b) {
		t.Fatalf("head buffer is %d bytes, input %d", len(h.Buf), len(b))
	}
	if err := checkSpans(h); err != nil {
		t.Fatal(err)
	}
	if h.ContentLength < -1 {
		t.Fatalf("contentLength = %d", h.ContentLength)
	}
	if h.Chunked && h.ContentLength >= 0 {
		t.Fatalf("both chunked and contentLength %d", h.ContentLength)
	}
	if h.Status == 0 && h.Chunked && h.TEOther {
		t.Fatal("a request both chunked and in another coding")
	}
	if h.Minor < 0 || h.Minor > 9 {
		t.Fatalf("minor = %d", h.Minor)
	}
	h.DropConnectionListed()
	for _, f := range h.Fields {
		if f.Drop {
			continue
		}
		// Whatever Connection lists, the body's framing goes out with it.
		name := f.Name.Of(h.Buf)
		if EqualFold(name, "connection") || EqualFold(name, "proxy-connection") || EqualFold(name, "proxy-authorization") {
			t.Fatalf("hop-by-hop field %q not dropped", name)
		}
	}
	if h.ContentLength >= 0 && !h.TEOther {
		if i := h.FieldIndex("content-length"); i < 0 || h.Fields[i].Drop {
			t.Fatalf("contentLength %d but its first field is dropped or gone", h.ContentLength)
		}
	}
}

func FuzzParseRequest(f *testing.F) {
	f.Add(browserRequest)
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Head
		inputs := [][]byte{data}
		if n := findHeadEnd(data, 0); n > 0 && n < len(data) {
			inputs = append(inputs, data[:n])
		}
		for _, b := range inputs {
			err := h.ParseRequest(b)
			if err != nil {
				// Every refusal is answered: it carries its status.
				switch statusOf(err) {
				case 400, 431, 501, 505:
				default:
					t.Fatalf("parseRequest error %v has status %d", err, statusOf(err))
				}
				continue
			}
			if h.TEOther {
				t.Fatal("teOther set on an accepted request")
			}
			if h.Method.Empty() || h.Target.Empty() {
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
func compareWithNetHTTP(t *testing.T, h *Head, b []byte) {
	t.Helper()
	req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return
	}
	goChunked := len(req.TransferEncoding) > 0 && req.TransferEncoding[len(req.TransferEncoding)-1] == "chunked"
	if goChunked != h.Chunked {
		t.Fatalf("chunked = %v, net/http says %v (TE %q)", h.Chunked, goChunked, req.TransferEncoding)
	}
	if !goChunked {
		cl := max(h.ContentLength, 0)
		if cl != req.ContentLength {
			t.Fatalf("body length %d, net/http says %d", cl, req.ContentLength)
		}
	}
}

func FuzzParseResponse(f *testing.F) {
	f.Add(sampleResponse)
	f.Fuzz(func(t *testing.T, data []byte) {
		var h Head
		inputs := [][]byte{data}
		if n := findHeadEnd(data, 0); n > 0 && n < len(data) {
			inputs = append(inputs, data[:n])
		}
		for _, b := range inputs {
			err := h.ParseResponse(b)
			if err != nil {
				// An upstream's fault is never mistaken for the client's.
				if err != ErrBadStatusLine && err != ErrBadResponseHead {
					t.Fatalf("parseResponse error %v, want errBadStatusLine or errBadResponseHead", err)
				}
				continue
			}
			if h.Status < 100 || h.Status > 599 {
				t.Fatalf("status = %d", h.Status)
			}
			if h.Minor == 0 && h.Chunked {
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

// TestParseFuzzHelpers makes sure the fuzz checks can fail: a broken head and
// a broken target are caught.
func TestParseFuzzHelpers(t *testing.T) {
	var h Head
	if err := h.ParseRequest(rawHead("GET http://h/ HTTP/1.1", "Host: h")); err != nil {
		t.Fatal(err)
	}
	h.Fields[0].Value.End = int32(len(h.Buf) + 1)
	if checkSpans(&h) == nil {
		t.Error("checkSpans passed a span past the buffer")
	}
	h.Fields[0].Value = Span{3, 2}
	if checkSpans(&h) == nil {
		t.Error("checkSpans passed a reversed span")
	}
	if _, err := feedChunked([]byte("0\r\n\r\n"), []int{3, 1}); err == nil {
		t.Error("feedChunked took descending cuts")
	}
}
