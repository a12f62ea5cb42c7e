package h3

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// forward serves a request for an HTTP/1.1 origin: the request goes out
// on an upstream connection from the keep-alive pool the other
// front-ends share (checked by the grant) or dialed through the grant,
// without its hop-by-hop fields, with the configured Forwarded and Via;
// the response comes back without its own, and the connection goes back
// to the pool when both messages were complete and the origin keeps it.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, cs *connState, q *request, g *gate.Grant) {
	key := string(gate.AppendHostPort(nil, q.host, q.port, q.ipv6))
	out, body := s.outgoing(r, cs, q)
	body.g = g
	canRetry := out.Body == nil && gate.Idempotent(r.Method)

	var up net.Conn
	var br *bufio.Reader
	var resp *http.Response
	var sent time.Time
	var err error
	for attempt := 0; ; attempt++ {
		var reused bool
		up, reused, err = s.upstream(r.Context(), g, key, attempt > 0, canRetry)
		if err != nil {
			s.answerFailure(w, g, err, key)
			return
		}
		resp, br, sent, err = s.exchange(r.Context(), up, out)
		if err == nil || attempt > 0 || !reused || !canRetry || !deadConn(err) {
			break
		}
		up.Close() // a pooled connection the origin had closed: once more on a fresh one
	}
	if err != nil {
		up.Close()
		s.answerFailure(w, g, err, key)
		return
	}
	stop := context.AfterFunc(r.Context(), func() { up.Close() }) // the client reset the stream
	reuse := false
	defer func() {
		if !stop() || !reuse || g.Pool() == nil {
			up.Close()
			return
		}
		up.SetDeadline(time.Time{})
		g.Pool().Put(key, g.PoolOwner(), up)
	}()
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		g.SetReason(accesslog.ReasonUpstreamFailed)
		answer(w, g, 502, "upstream "+key+" switched protocols without an upgrade request")
		return
	}
	up.SetReadDeadline(time.Time{})
	g.FirstByte(sent)
	copyEndToEnd(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	g.Answer(resp.StatusCode, 0)
	var down int64
	buf := make([]byte, 16<<10)
	complete := false
	for {
		if s.cfg.WriteTimeout > 0 {
			up.SetReadDeadline(time.Now().Add(s.cfg.WriteTimeout))
		}
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			g.Pace(r.Context(), n)
			m, werr := w.Write(buf[:n])
			down += int64(m)
			if werr != nil {
				break
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				complete = true
			} else {
				g.SetReason(accesslog.ReasonUpstreamFailed)
			}
			break
		}
	}
	reuse = complete && !resp.Close && br.Buffered() == 0
	g.Finish(body.n, down)
}

// upstream returns a pooled connection to key that the grant admits, or
// dials one, and reports whether it was pooled. fresh skips the pool.
func (s *Server) upstream(ctx context.Context, g *gate.Grant, key string, fresh, canRetry bool) (net.Conn, bool, error) {
	if p := g.Pool(); p != nil && !fresh {
		owner := g.PoolOwner()
		if up := p.Get([]byte(key), owner); up != nil {
			if g.Admits(up, owner, canRetry) {
				return up, true, nil
			}
			up.Close()
		}
	}
	up, err := g.Dial(ctx, key)
	if err != nil {
		return nil, false, err // not a nil *net.TCPConn in a non-nil net.Conn
	}
	return up, false, nil
}

// exchange writes out to up and reads the final response head (1xx
// responses skipped), within the write and response-header timeouts, and
// returns the response, its reader and when the request was sent.
func (s *Server) exchange(ctx context.Context, up net.Conn, out *http.Request) (*http.Response, *bufio.Reader, time.Time, error) {
	stop := context.AfterFunc(ctx, func() { up.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if s.cfg.WriteTimeout > 0 {
		up.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
	bw := bufio.NewWriterSize(up, 4096)
	err := out.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	sent := time.Now()
	if err != nil {
		return nil, nil, sent, err
	}
	if s.cfg.ResponseHeaderTimeout > 0 {
		up.SetReadDeadline(time.Now().Add(s.cfg.ResponseHeaderTimeout))
	}
	br := bufio.NewReaderSize(up, 4096)
	for {
		resp, err := http.ReadResponse(br, out)
		if err != nil {
			return nil, nil, sent, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, br, sent, nil
		}
		resp.Body.Close() // 1xx: the final response follows
	}
}

// outgoing returns the HTTP/1.1 request forwarded for r (q), and the
// reader that counts its body's bytes. It goes to the origin, through a
// tunnel when the route has a parent (see gate.Grant.Dial), never to a
// parent in absolute form: a Via naming this rustle is on the CONNECT.
func (s *Server) outgoing(r *http.Request, cs *connState, q *request) (*http.Request, *countingReader) {
	out := &http.Request{
		Method:        r.Method,
		URL:           &url.URL{Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery},
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header, len(r.Header)+2),
		Host:          r.Host,
		ContentLength: r.ContentLength,
	}
	if r.URL.Path == "" {
		out.URL.Path = "/"
	}
	copyEndToEnd(out.Header, r.Header)
	if name := gate.ForwardedName(s.cfg.Forwarded); name != "" {
		var b []byte
		if prev := out.Header.Values(name); len(prev) > 0 {
			b = append(b, strings.Join(prev, ", ")...)
			b = append(b, ", "...)
		}
		b = gate.AppendForwardedFor(b, s.cfg.Forwarded, cs.sess.ClientIP())
		out.Header[name] = []string{string(b)}
	}
	if q.limitHops {
		out.Header["Max-Forwards"] = []string{strconv.Itoa(q.maxFwd)}
	}
	if s.cfg.Via {
		out.Header.Add("Via", "3 rustle")
	}
	if out.Header.Get("User-Agent") == "" {
		out.Header["User-Agent"] = []string{""} // net/http would add its own
	}
	body := &countingReader{r: r.Body, g: nil, ctx: r}
	switch {
	case r.ContentLength > 0:
		out.Body = io.NopCloser(body)
	case r.ContentLength < 0:
		// Unknown: a request whose HEADERS ended the stream reads EOF at
		// once and has none (no chunked framing, and no probe by
		// net/http); another's first bytes go first.
		var first [1]byte
		n, err := r.Body.Read(first[:])
		if n == 0 && err == io.EOF {
			out.ContentLength = 0
			break
		}
		body.r = io.MultiReader(strings.NewReader(string(first[:n])), r.Body)
		out.Body = io.NopCloser(body)
	}
	return out, body
}

// deadConn reports whether err says a pooled connection had been closed
// by the origin before the request reached it.
func deadConn(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// answerFailure answers a request whose upstream exchange failed before
// any of the response was sent.
func (s *Server) answerFailure(w http.ResponseWriter, g *gate.Grant, err error, target string) {
	status, reason, text := gate.UpstreamFailure(err, target)
	if reason != "" {
		g.SetReason(reason)
	}
	answer(w, g, status, text)
}

// copyEndToEnd copies the fields of src to dst less the hop-by-hop ones:
// those gate.HopByHop names and those src's Connection field lists.
func copyEndToEnd(dst, src http.Header) {
	var listed []string
	for _, v := range src["Connection"] {
		for _, name := range strings.Split(v, ",") {
			if name = textproto.TrimString(name); name != "" {
				listed = append(listed, http.CanonicalHeaderKey(name))
			}
		}
	}
next:
	for name, vs := range src {
		if gate.HopByHop(name) {
			continue
		}
		for _, l := range listed {
			if l == name {
				continue next
			}
		}
		dst[name] = append(dst[name], vs...)
	}
}

// countingReader counts the request body bytes read (and so written
// upstream), pacing a paced user's.
type countingReader struct {
	r   io.Reader
	g   *gate.Grant
	ctx *http.Request
	n   int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		if c.g != nil {
			c.g.Pace(c.ctx.Context(), n)
		}
		c.n += int64(n)
	}
	return n, err
}
