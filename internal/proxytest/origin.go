package proxytest

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
)

// Request is a request as an Origin received it.
type Request struct {
	// Head is the request head exactly as received, request line through
	// the empty line.
	Head []byte
	// Method, Target and Proto are the three parts of the request line.
	Method, Target, Proto string
	// Header holds the header fields in order, names in their case.
	Header Header
	// RawBody is the body as received, chunk framing and trailers
	// included; Body is its payload. Both are set once the body has been
	// read to its end, and stay nil for a body never read.
	RawBody, Body []byte
	// Trailer holds the trailer fields of a chunked body.
	Trailer Header
	// BodyDone reports that the body was read to its end.
	BodyDone bool
	// Conn is the number of the origin connection the request came on,
	// from 1 in order of acceptance; Seq is its position on that
	// connection, from 1.
	Conn, Seq int
}

// Path returns the target without its query.
func (r *Request) Path() string {
	p, _, _ := strings.Cut(r.Target, "?")
	return p
}

// Handler scripts an Origin's answer to one request. It runs on the
// connection's goroutine and may read the body, write anything, and ask
// for the connection to be closed; see Exchange.
type Handler func(x *Exchange)

// Origin is a raw-TCP HTTP/1.1 origin server on the loopback. It parses
// request heads and bodies itself, records them as received, and answers
// as its handlers script. Create one with NewOrigin.
type Origin struct {
	// Addr is the IPv4 loopback address it listens on ("127.0.0.1:port").
	Addr string
	// Addr6 is its IPv6 loopback address ("[::1]:port"), or "" when the
	// host has no IPv6 loopback.
	Addr6 string

	lns []net.Listener
	wg  sync.WaitGroup

	mu       sync.Mutex
	def      Handler            // guarded by mu
	routes   map[string]Handler // guarded by mu
	conns    map[net.Conn]bool  // open connections; guarded by mu
	accepted int                // guarded by mu
	closedN  int                // connections ended; guarded by mu
	reqs     []*Request         // guarded by mu, as is every field of each
	closed   bool               // guarded by mu
	closeCh  chan struct{}      // closed by Close
}

// NewOrigin starts an Origin whose handler for every path without a route
// is h (nil: 404). It is closed by t.Cleanup.
func NewOrigin(t testing.TB, h Handler) *Origin {
	t.Helper()
	o := &Origin{def: h, routes: map[string]Handler{}, conns: map[net.Conn]bool{}, closeCh: make(chan struct{})}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxytest: origin listen: %v", err)
	}
	o.lns = append(o.lns, ln)
	o.Addr = ln.Addr().String()
	if IPv6Loopback() {
		if ln6, err := net.Listen("tcp6", "[::1]:0"); err == nil {
			o.lns = append(o.lns, ln6)
			o.Addr6 = ln6.Addr().String()
		}
	}
	for _, ln := range o.lns {
		o.wg.Add(1)
		go o.acceptLoop(ln)
	}
	t.Cleanup(o.Close)
	return o
}

// Handle routes requests whose path (the target without its query) is
// path to h. It may be called while the origin serves.
func (o *Origin) Handle(path string, h Handler) {
	o.mu.Lock()
	o.routes[path] = h
	o.mu.Unlock()
}

// URL returns "http://" + o.Addr + path, an absolute-form target.
func (o *Origin) URL(path string) string { return "http://" + o.Addr + path }

// URL6 returns "http://" + o.Addr6 + path.
func (o *Origin) URL6(path string) string { return "http://" + o.Addr6 + path }

// Conns returns how many connections the origin has accepted.
func (o *Origin) Conns() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.accepted
}

// ClosedConns returns how many accepted connections have ended.
func (o *Origin) ClosedConns() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.closedN
}

// NumRequests returns how many request heads the origin has received.
func (o *Origin) NumRequests() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.reqs)
}

// Requests returns copies of the requests received so far, in order.
func (o *Origin) Requests() []Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	rs := make([]Request, len(o.reqs))
	for i, r := range o.reqs {
		rs[i] = *r
	}
	return rs
}

// Close stops the origin: it closes the listeners and every connection
// and waits for its goroutines. It is idempotent.
func (o *Origin) Close() {
	o.mu.Lock()
	if !o.closed {
		o.closed = true
		close(o.closeCh)
		for _, ln := range o.lns {
			ln.Close()
		}
		for c := range o.conns {
			c.Close()
		}
	}
	o.mu.Unlock()
	o.wg.Wait()
}

func (o *Origin) acceptLoop(ln net.Listener) {
	defer o.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return // closed; loopback accepts fail for no other reason a test survives
		}
		o.mu.Lock()
		if o.closed {
			o.mu.Unlock()
			c.Close()
			return
		}
		o.accepted++
		n := o.accepted
		o.conns[c] = true
		o.wg.Add(1)
		o.mu.Unlock()
		go o.serveConn(c, n)
	}
}

// serveConn reads requests from c and runs their handlers until either
// side closes.
func (o *Origin) serveConn(c net.Conn, connNo int) {
	defer o.wg.Done()
	defer func() {
		c.Close()
		o.mu.Lock()
		delete(o.conns, c)
		o.closedN++
		o.mu.Unlock()
	}()
	br := bufio.NewReaderSize(c, 64<<10)
	for seq := 1; ; seq++ {
		head, err := readHead(br)
		if err != nil {
			if len(head) > 0 {
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			}
			return
		}
		req := &Request{Head: head, Conn: connNo, Seq: seq}
		first, h, herr := splitHead(head)
		req.Header = h
		parts := strings.SplitN(first, " ", 3)
		if len(parts) == 3 {
			req.Method, req.Target, req.Proto = parts[0], parts[1], parts[2]
		}
		o.mu.Lock()
		o.reqs = append(o.reqs, req)
		handler := o.routes[req.Path()]
		if handler == nil {
			handler = o.def
		}
		o.mu.Unlock()
		x := &Exchange{Req: req, o: o, c: c, br: br}
		if herr != nil || len(parts) != 3 {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		if err := x.initBody(); err != nil {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
			return
		}
		if handler == nil {
			handler = Respond(404, "no handler for "+req.Path()+"\n")
		}
		handler(x)
		if x.closeConn {
			return
		}
		if !x.bodyDone {
			if _, err := x.ReadBody(); err != nil {
				return
			}
		}
		if !keepAlive(req.Proto, req.Header) {
			return
		}
	}
}

// keepAlive reports whether a message of proto with header h leaves the
// connection open.
func keepAlive(proto string, h Header) bool {
	if h.hasToken("Connection", "close") {
		return false
	}
	return proto == "HTTP/1.1" || h.hasToken("Connection", "keep-alive")
}

// Exchange is one request being answered by an Origin handler.
type Exchange struct {
	// Req is the request. Its body fields are filled, under the origin's
	// lock, when the body has been read to its end.
	Req *Request

	o         *Origin
	c         net.Conn
	br        *bufio.Reader
	body      io.Reader // the decoded body; nil when there is none
	cr        *chunkedReader
	raw, data bytes.Buffer
	bodyDone  bool
	closeConn bool
}

func (x *Exchange) initBody() error {
	h := x.Req.Header
	switch {
	case chunked(h):
		x.cr = &chunkedReader{br: x.br, raw: &x.raw}
		x.body = x.cr
	default:
		n, err := contentLength(h)
		if err != nil {
			return err
		}
		if n <= 0 {
			x.finish()
			return nil
		}
		x.body = &lengthReader{br: x.br, raw: &x.raw, n: n}
	}
	return nil
}

// finish records the body read to its end.
func (x *Exchange) finish() {
	if x.bodyDone {
		return
	}
	x.bodyDone = true
	x.o.mu.Lock()
	x.Req.RawBody = bytes.Clone(x.raw.Bytes())
	x.Req.Body = bytes.Clone(x.data.Bytes())
	if x.cr != nil {
		x.Req.Trailer = x.cr.trailer
	}
	x.Req.BodyDone = true
	x.o.mu.Unlock()
}

// Body returns a reader of the decoded request body, which streams it as
// it arrives. Reading it to io.EOF records the body on Req.
func (x *Exchange) Body() io.Reader { return bodyReader{x} }

type bodyReader struct{ x *Exchange }

func (b bodyReader) Read(p []byte) (int, error) {
	x := b.x
	if x.bodyDone {
		return 0, io.EOF
	}
	n, err := x.body.Read(p)
	x.data.Write(p[:n])
	if err == io.EOF {
		x.finish()
	}
	return n, err
}

// ReadBody reads the rest of the request body and returns its payload.
func (x *Exchange) ReadBody() ([]byte, error) {
	if !x.bodyDone {
		if _, err := io.Copy(io.Discard, x.Body()); err != nil {
			return nil, err
		}
	}
	return x.Req.Body, nil
}

// RawSoFar returns a copy of the request body's bytes as read so far, as
// they came on the wire (framing included): for a body that never ends.
func (x *Exchange) RawSoFar() []byte { return bytes.Clone(x.raw.Bytes()) }

// Write writes p to the connection as it is.
func (x *Exchange) Write(p []byte) (int, error) { return x.c.Write(p) }

// WriteString writes s to the connection as it is.
func (x *Exchange) WriteString(s string) (int, error) { return io.WriteString(x.c, s) }

// Conn returns the connection, for scripts that need more than Write.
func (x *Exchange) Conn() net.Conn { return x.c }

// CloseConn makes the origin close the connection when the handler
// returns, without reading the rest of the request body.
func (x *Exchange) CloseConn() { x.closeConn = true }

// Done returns a channel closed when the origin is closing.
func (x *Exchange) Done() <-chan struct{} { return x.o.closeCh }
