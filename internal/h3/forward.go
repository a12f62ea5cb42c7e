package h3

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/rustle-proxy/rustle/internal/accesslog"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// forward serves a request for an HTTP/1.1 origin: the request goes out
// on a new upstream connection dialed through the grant, without its
// hop-by-hop fields, with the configured Forwarded and Via; the response
// comes back without its own.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, cs *connState, q *request, g *gate.Grant) {
	addr := string(gate.AppendHostPort(nil, q.host, q.port, q.ipv6))
	up, err := g.Dial(r.Context(), addr)
	if err != nil {
		s.answerFailure(w, g, err, addr)
		return
	}
	defer up.Close()
	stop := context.AfterFunc(r.Context(), func() { up.Close() }) // the client reset the stream
	defer stop()

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
	if s.cfg.Via {
		out.Header.Add("Via", "3 rustle")
	}
	if out.Header.Get("User-Agent") == "" {
		out.Header["User-Agent"] = []string{""} // net/http would add its own
	}
	body := &countingReader{r: r.Body, g: g, ctx: r}
	if r.ContentLength != 0 {
		out.Body = io.NopCloser(body)
	}
	if s.cfg.WriteTimeout > 0 {
		up.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
	}
	bw := bufio.NewWriterSize(up, 4096)
	err = out.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	sent := time.Now()
	if err != nil {
		s.answerFailure(w, g, err, addr)
		return
	}
	if s.cfg.ResponseHeaderTimeout > 0 {
		up.SetReadDeadline(time.Now().Add(s.cfg.ResponseHeaderTimeout))
	}
	br := bufio.NewReaderSize(up, 4096)
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(br, out)
		if err != nil {
			s.answerFailure(w, g, err, addr)
			return
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		resp.Body.Close() // 1xx: the final response follows
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		g.SetReason(accesslog.ReasonUpstreamFailed)
		answer(w, g, 502, "upstream "+addr+" switched protocols without an upgrade request")
		return
	}
	up.SetReadDeadline(time.Time{})
	g.FirstByte(sent)
	copyEndToEnd(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	g.Answer(resp.StatusCode, 0)
	var down int64
	buf := make([]byte, 16<<10)
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
			if rerr != io.EOF {
				g.SetReason(accesslog.ReasonUpstreamFailed)
			}
			break
		}
	}
	g.Finish(body.n, down)
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
		c.g.Pace(c.ctx.Context(), n)
		c.n += int64(n)
	}
	return n, err
}
