package h2

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/rustle-proxy/rustle/internal/acl"
	"github.com/rustle-proxy/rustle/internal/masque"
	"github.com/rustle-proxy/rustle/internal/origin"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// fieldsOf turns "name: value" lines into header fields (a name may
// start with ':'; everything after the first ": " is the value).
func fieldsOf(b []byte) []hpack.HeaderField {
	var fields []hpack.HeaderField
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line[min(1, len(line)):], ": ")
		if !ok {
			continue
		}
		fields = append(fields, hpack.HeaderField{Name: line[:min(1, len(line))] + name, Value: value})
	}
	return fields
}

// udpTemplate is the default CONNECT-UDP URI template.
var udpTemplate = func() *masque.Template {
	t, err := masque.ParseTemplate(masque.DefaultTemplate)
	if err != nil {
		panic(err)
	}
	return t
}()

// FuzzParseRequest checks that parseRequest never panics, and that the
// HTTP/1.1 head built from a request it accepts for forwarding is one
// HTTP/1.1 request naming the same target: no field of the client's can
// smuggle a line or a second request into it.
func FuzzParseRequest(f *testing.F) {
	f.Add([]byte(":method: GET\n:scheme: http\n:authority: example.com\n:path: /\naccept: */*"))
	f.Add([]byte(":method: CONNECT\n:authority: example.com:443"))
	f.Add([]byte(":method: CONNECT\n:protocol: connect-udp\n:scheme: https\n:authority: proxy:8443\n:path: /.well-known/masque/udp/dns.example/53/\ncapsule-protocol: ?1"))
	f.Add([]byte(":method: CONNECT\n:protocol: websocket\n:scheme: http\n:authority: example.com\n:path: /chat\nsec-websocket-version: 13"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fields := fieldsOf(b)
		self := netip.MustParseAddrPort("127.0.0.1:8443")
		r, err := parseRequest(fields, true, self)
		if err != nil || r.kind == kindLocal {
			return
		}
		if r.kind == kindConnect {
			if r.port < 1 || r.port > 65535 || r.host == "" {
				t.Fatalf("CONNECT target %q parsed to %q port %d", r.authority, r.host, r.port)
			}
			return
		}
		if r.kind == kindConnectUDP {
			// Not forwarded: its :path names a UDP target, which the
			// worker matches against the URI template.
			if r.method != "CONNECT" || r.protocol != protoConnectUDP || r.path == "" {
				t.Fatalf("CONNECT-UDP request %+v", r)
			}
			if host, port, err := udpTemplate.Match(r.path); err == nil && (host == "" || port == 0) {
				t.Fatalf("CONNECT-UDP :path %q matched to %q port %d", r.path, host, port)
			}
			return
		}
		r.fields = fields[firstRegular(fields):]
		// rustle forwards a path's bytes as they came (as its HTTP/1.1
		// port does), an invalid escape like "/%" included; net/http's
		// reader refuses those, so '%' is escaped for it. No '%' can end a
		// line or a request.
		r.path = strings.ReplaceAll(r.path, "%", "%25")
		fr := r.fieldRequest(netip.MustParseAddr("192.0.2.1"))
		fr.HasBody, fr.WebSocketKey = true, "dGhlIHNhbXBsZSBub25jZQ=="
		head, chunked := fuzzOrigin.AppendFieldHead(nil, &fr, nil, nil)
		br := bufio.NewReader(bytes.NewReader(head))
		req, err := http.ReadRequest(br)
		if err != nil {
			t.Fatalf("head for %q does not parse: %v\n%s", b, err, head)
		}
		if br.Buffered() != 0 {
			t.Fatalf("head for %q holds more than one request:\n%s", b, head)
		}
		if req.Host != r.authority {
			t.Fatalf("Host %q, want %q", req.Host, r.authority)
		}
		if chunked != (len(req.TransferEncoding) > 0) {
			t.Fatalf("chunked %v but Transfer-Encoding %v", chunked, req.TransferEncoding)
		}
	})
}

// fuzzOrigin is the origin client FuzzRequestHead builds heads with.
var fuzzOrigin = mustOrigin(origin.Config{Forwarded: origin.ForwardedRFC, Via: true, MaxHeaderBytes: 65536})

// FuzzServeConn feeds arbitrary bytes after the connection preface to a
// connection, which must neither panic nor outlive its client. Every
// request is refused by the access policy, so nothing is dialed.
func FuzzServeConn(f *testing.F) {
	for _, seed := range serveConnSeeds() {
		f.Add(seed)
	}
	pol := proxytest.NewPolicy(f, proxytest.PolicyConfig{Rules: []acl.Rule{}, Default: acl.Deny, DialTimeout: time.Second})
	srv, err := New(testConfig(Config{
		MaxConcurrentStreams: 4,
		HandshakeTimeout:     2 * time.Second,
		WriteTimeout:         2 * time.Second,
	}))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		client, server := net.Pipe()
		sess := proxytest.NewSession(t, pol, server, nil)
		done := make(chan struct{})
		go func() {
			defer close(done)
			defer sess.Close()
			srv.serveConn(server, sess, false)
		}()
		drained := make(chan struct{})
		go func() {
			io.Copy(io.Discard, client)
			close(drained)
		}()
		client.SetWriteDeadline(time.Now().Add(2 * time.Second))
		client.Write([]byte(http2.ClientPreface))
		client.Write(b)
		time.Sleep(time.Millisecond)
		client.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("ServeConn did not return after its client closed (input %q)", b)
		}
		<-drained
	})
}

// serveConnSeeds returns frame sequences for FuzzServeConn.
func serveConnSeeds() [][]byte {
	var seeds [][]byte
	frames := func(write func(fr *http2.Framer, enc func(...string) []byte)) []byte {
		var out, hb bytes.Buffer
		fr := http2.NewFramer(&out, nil)
		he := hpack.NewEncoder(&hb)
		enc := func(kv ...string) []byte {
			hb.Reset()
			for i := 0; i+1 < len(kv); i += 2 {
				he.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
			}
			return append([]byte(nil), hb.Bytes()...)
		}
		fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		write(fr, enc)
		return out.Bytes()
	}
	seeds = append(seeds, frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true, EndStream: true,
			BlockFragment: enc(":method", "GET", ":scheme", "http", ":authority", "example.com", ":path", "/")})
		fr.WritePing(false, [8]byte{1})
	}))
	seeds = append(seeds, frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, EndHeaders: true,
			BlockFragment: enc(":method", "POST", ":scheme", "https", ":authority", "x", ":path", "/", "content-length", "4")})
		fr.WriteDataPadded(1, false, []byte("ab"), []byte{0, 0})
		fr.WriteWindowUpdate(1, 10)
		fr.WriteData(1, true, []byte("cd"))
		fr.WriteRSTStream(1, http2.ErrCodeCancel)
	}))
	seeds = append(seeds, frames(func(fr *http2.Framer, enc func(...string) []byte) {
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, EndHeaders: false,
			BlockFragment: enc(":method", "CONNECT", ":authority", "example.com:443")})
		fr.WriteContinuation(3, true, enc("x-a", "b"))
		fr.WriteData(3, false, []byte("tunnel"))
		fr.WriteGoAway(3, http2.ErrCodeNo, nil)
	}))
	return seeds
}
