package proxytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// DefaultTimeout bounds each read or write of a Client, and each wait of
// the helpers that read from a connection.
const DefaultTimeout = 10 * time.Second

// Response is a response as a Client received it.
type Response struct {
	// Head is the response head exactly as received.
	Head []byte
	// Proto, Status and Reason are the parts of the status line.
	Proto  string
	Status int
	Reason string
	// Header holds the header fields in order, names in their case.
	Header Header
	// RawBody is the body as received, chunk framing and trailers
	// included; Body is its payload.
	RawBody, Body []byte
	// Trailer holds the trailer fields of a chunked body.
	Trailer Header
	// Closed reports that the body was delimited by the end of the
	// connection.
	Closed bool
}

// Client is a raw HTTP/1.1 client connection: it writes exactly the bytes
// it is given and parses the responses that come back. Create one with
// Dial; it is closed by t.Cleanup.
type Client struct {
	// Conn is the connection, for writes the helpers do not cover.
	Conn *net.TCPConn
	// Timeout bounds each read and write; 0 = DefaultTimeout.
	Timeout time.Duration

	t  testing.TB
	br *bufio.Reader
}

// Dial connects a Client to addr.
func Dial(t testing.TB, addr string) *Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, DefaultTimeout)
	if err != nil {
		t.Fatalf("proxytest: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return &Client{Conn: c.(*net.TCPConn), t: t, br: bufio.NewReaderSize(c, 64<<10)}
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// Write writes s in one write call.
func (c *Client) Write(s string) {
	c.t.Helper()
	c.Conn.SetWriteDeadline(time.Now().Add(c.timeout()))
	if _, err := io.WriteString(c.Conn, s); err != nil {
		c.t.Fatalf("proxytest: write request: %v", err)
	}
}

// ReadResponse reads one response, a 1xx one included, to a request of
// method, failing the test on error.
func (c *Client) ReadResponse(method string) *Response {
	c.t.Helper()
	r, err := c.TryReadResponse(method)
	if err != nil {
		c.t.Fatalf("proxytest: read response: %v", err)
	}
	return r
}

// TryReadResponse reads one response, a 1xx one included, to a request of
// method.
func (c *Client) TryReadResponse(method string) (*Response, error) {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout()))
	return ReadResponse(c.br, method)
}

// RoundTrip writes req and reads responses to it until a final one,
// which it returns; interim 1xx responses are returned too, in order.
func (c *Client) RoundTrip(req string) (final *Response, interim []*Response) {
	c.t.Helper()
	method, _, _ := strings.Cut(req, " ")
	c.Write(req)
	for range 16 {
		r := c.ReadResponse(method)
		if r.Status >= 200 {
			return r, interim
		}
		interim = append(interim, r)
	}
	c.t.Fatalf("proxytest: more than 16 interim responses")
	return nil, nil
}

// ReadAll reads until the connection ends and returns what arrived.
func (c *Client) ReadAll() []byte {
	c.t.Helper()
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout()))
	b, err := io.ReadAll(c.br)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		c.t.Fatalf("proxytest: read to the end: %v (after %q)", err, b)
	}
	return b
}

// ExpectClosed fails the test unless the peer ends the connection (FIN or
// reset) within the timeout with no byte arriving first.
func (c *Client) ExpectClosed() {
	c.t.Helper()
	if err := c.WaitClosed(); err != nil {
		c.t.Fatal(err)
	}
}

// WaitClosed waits for the peer to end the connection and returns an
// error if bytes arrive or the timeout passes first.
func (c *Client) WaitClosed() error {
	c.Conn.SetReadDeadline(time.Now().Add(c.timeout()))
	var b [512]byte
	n, err := c.br.Read(b[:])
	switch {
	case n > 0:
		return fmt.Errorf("proxytest: expected the connection to close, got %q", b[:n])
	case err == io.EOF || errors.Is(err, syscall.ECONNRESET):
		return nil
	default:
		return fmt.Errorf("proxytest: expected the connection to close: %v", err)
	}
}

// Close closes the connection.
func (c *Client) Close() { c.Conn.Close() }

// ReadResponse reads one response to a request of method from br: a 1xx
// response, or a final one with its body framed as RFC 9112 §6.3 says.
func ReadResponse(br *bufio.Reader, method string) (*Response, error) {
	head, err := readHead(br)
	if err != nil {
		return nil, fmt.Errorf("proxytest: read response head: %w (got %q)", err, head)
	}
	first, h, err := splitHead(head)
	if err != nil {
		return nil, err
	}
	r := &Response{Head: head, Header: h}
	proto, rest, ok1 := strings.Cut(first, " ")
	code, reason, _ := strings.Cut(rest, " ")
	st, err := strconv.Atoi(code)
	if !ok1 || err != nil || len(code) != 3 || !strings.HasPrefix(proto, "HTTP/1.") {
		return nil, fmt.Errorf("proxytest: malformed status line %q", first)
	}
	r.Proto, r.Status, r.Reason = proto, st, reason
	var raw, data bytes.Buffer
	var body io.Reader
	switch {
	case bodiless(method, st):
	case chunked(h):
		cr := &chunkedReader{br: br, raw: &raw}
		if _, err := io.Copy(&data, cr); err != nil {
			return nil, err
		}
		r.Trailer = cr.trailer
	default:
		n, err := contentLength(h)
		if err != nil {
			return nil, err
		}
		if n >= 0 {
			body = &lengthReader{br: br, raw: &raw, n: n}
		} else {
			body = &closeReader{br: br, raw: &raw}
			r.Closed = true
		}
		if _, err := io.Copy(&data, body); err != nil {
			return nil, fmt.Errorf("proxytest: read response body: %w", err)
		}
	}
	r.RawBody, r.Body = raw.Bytes(), data.Bytes()
	return r, nil
}

// Connect opens a CONNECT tunnel to target through the proxy at
// proxyAddr, sending the header lines given ("Name: value"). It fails the
// test unless the proxy answers 200. The connection is closed by
// t.Cleanup.
func Connect(t testing.TB, proxyAddr, target string, header ...string) net.Conn {
	t.Helper()
	c := dialConnect(t, proxyAddr, target, header)
	if _, err := c.Write(nil); err != nil {
		t.Fatalf("proxytest: CONNECT %s: %v", target, err)
	}
	if err := c.readAnswer(); err != nil {
		t.Fatalf("proxytest: CONNECT %s: %v", target, err)
	}
	return c
}

// ConnectPipelined returns a connection to the proxy at proxyAddr whose
// first Write sends the CONNECT request for target and the bytes written
// together, in one write call, and whose first Read consumes the proxy's
// answer (an error unless it is 200) before returning tunnel bytes. It
// tests that bytes pipelined behind a CONNECT head reach the target.
func ConnectPipelined(t testing.TB, proxyAddr, target string, header ...string) net.Conn {
	t.Helper()
	return dialConnect(t, proxyAddr, target, header)
}

// ConnectOn is Connect on nc, a connection to the proxy the caller has
// made (a TLS connection to an https listener): it sends the CONNECT
// request for target and reads an answer of 200, and returns the
// tunnel, which closes nc when it closes.
func ConnectOn(t testing.TB, nc net.Conn, target string, header ...string) net.Conn {
	t.Helper()
	c := connectOn(nc, target, header)
	if _, err := c.Write(nil); err != nil {
		t.Fatalf("proxytest: CONNECT %s: %v", target, err)
	}
	if err := c.readAnswer(); err != nil {
		t.Fatalf("proxytest: CONNECT %s: %v", target, err)
	}
	return c
}

// SOCKS4aConnect opens a SOCKS4a CONNECT tunnel to host:port through
// the SOCKS listener at proxyAddr, with an empty user ID and the host
// sent as a name for the proxy to resolve. It fails the test unless the
// proxy grants it (reply code 90). The connection is closed by
// t.Cleanup.
func SOCKS4aConnect(t testing.TB, proxyAddr, host string, port uint16) net.Conn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", proxyAddr, DefaultTimeout)
	if err != nil {
		t.Fatalf("proxytest: dial proxy %s: %v", proxyAddr, err)
	}
	t.Cleanup(func() { nc.Close() })
	// VN 4, CD 1 (CONNECT), DSTPORT, DSTIP 0.0.0.1 (a name follows),
	// an empty USERID, the name.
	req := append([]byte{4, 1, byte(port >> 8), byte(port), 0, 0, 0, 1, 0}, host...)
	req = append(req, 0)
	nc.SetDeadline(time.Now().Add(DefaultTimeout))
	if _, err := nc.Write(req); err != nil {
		t.Fatalf("proxytest: SOCKS4a CONNECT %s:%d: %v", host, port, err)
	}
	var rep [8]byte
	if _, err := io.ReadFull(nc, rep[:]); err != nil {
		t.Fatalf("proxytest: SOCKS4a CONNECT %s:%d: read the reply: %v", host, port, err)
	}
	if rep[0] != 0 || rep[1] != 90 {
		t.Fatalf("proxytest: SOCKS4a CONNECT %s:%d: reply % x, want 00 5a", host, port, rep[:2])
	}
	nc.SetDeadline(time.Time{})
	return nc
}

func dialConnect(t testing.TB, proxyAddr, target string, header []string) *connectConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", proxyAddr, DefaultTimeout)
	if err != nil {
		t.Fatalf("proxytest: dial proxy %s: %v", proxyAddr, err)
	}
	t.Cleanup(func() { nc.Close() })
	return connectOn(nc, target, header)
}

// connectOn returns the tunnel whose CONNECT request for target goes
// out on nc with its first write.
func connectOn(nc net.Conn, target string, header []string) *connectConn {
	req := "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n"
	for _, h := range header {
		req += h + "\r\n"
	}
	return &connectConn{Conn: nc, br: bufio.NewReader(nc), pending: []byte(req + "\r\n")}
}

// connectConn is a tunnel connection whose CONNECT request goes out with
// the first write and whose answer is read before the first read.
type connectConn struct {
	net.Conn
	br *bufio.Reader

	wmu     sync.Mutex
	pending []byte // the CONNECT request not yet written; guarded by wmu

	rmu      sync.Mutex
	answered bool  // guarded by rmu
	err      error // the answer's error; guarded by rmu
}

func (c *connectConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.pending != nil {
		b := append(c.pending, p...)
		c.pending = nil
		n, err := c.Conn.Write(b)
		n -= len(b) - len(p)
		if n < 0 {
			n = 0
		}
		return n, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	return c.Conn.Write(p)
}

func (c *connectConn) readAnswer() error {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	if c.answered {
		return c.err
	}
	c.answered = true
	r, err := ReadResponse(c.br, "CONNECT")
	if err == nil && r.Status != 200 {
		err = fmt.Errorf("proxytest: CONNECT answered %d %s: %q", r.Status, r.Reason, r.Body)
	}
	c.err = err
	return err
}

func (c *connectConn) Read(p []byte) (int, error) {
	if err := c.readAnswer(); err != nil {
		return 0, err
	}
	return c.br.Read(p)
}

// CloseWrite shuts down the writing side of the connection.
func (c *connectConn) CloseWrite() error {
	return c.Conn.(*net.TCPConn).CloseWrite()
}

// StreamConn returns the two directions of a tunnel carried in a
// request stream (an HTTP/2 or HTTP/3 CONNECT: the response body, and
// the writer of the request body) as a net.Conn, for a TLS client to
// run over; deadlines are ignored (the streams' requests carry their
// own), and Close closes both.
func StreamConn(r io.ReadCloser, w io.WriteCloser) net.Conn { return &streamConn{r: r, w: w} }

type streamConn struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (c *streamConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *streamConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *streamConn) Close() error {
	c.w.Close()
	return c.r.Close()
}
func (c *streamConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *streamConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *streamConn) SetDeadline(time.Time) error      { return nil }
func (c *streamConn) SetReadDeadline(time.Time) error  { return nil }
func (c *streamConn) SetWriteDeadline(time.Time) error { return nil }

// HoldConn is a client's connection that, between Hold and Flush,
// keeps what is written to it and sends it in one write on Flush: the
// TLS records written meanwhile then arrive together (in one record of
// a TLS connection under it). Its methods are safe for concurrent use
// with its writes.
type HoldConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
	// Held, when set, is signalled (without blocking) each time a write
	// is kept.
	Held chan struct{}
}

// Hold starts keeping what is written.
func (c *HoldConn) Hold() {
	c.mu.Lock()
	c.hold = true
	c.mu.Unlock()
}

func (c *HoldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.hold {
		return c.Conn.Write(p)
	}
	c.buf = append(c.buf, p...)
	if c.Held != nil {
		select {
		case c.Held <- struct{}{}:
		default:
		}
	}
	return len(p), nil
}

// Flush sends what was kept, in one write, and stops keeping.
func (c *HoldConn) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}
