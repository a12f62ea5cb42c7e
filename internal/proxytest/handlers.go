package proxytest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Scripted behaviours of an Origin. Handlers that answer read the whole
// request body first unless their documentation says otherwise.

// statusLine returns "HTTP/1.1 status Reason\r\n".
func statusLine(status int) string {
	reason := http.StatusText(status)
	if reason == "" {
		reason = "Status"
	}
	return "HTTP/1.1 " + strconv.Itoa(status) + " " + reason + "\r\n"
}

// bodiless reports whether a response to method with status has no body.
func bodiless(method string, status int) bool {
	return method == "HEAD" || status < 200 || status == 204 || status == 304 ||
		method == "CONNECT" && status/100 == 2
}

// Respond answers with status, the header lines given ("Name: value", in
// order) and body. It adds Content-Length unless the header lines carry
// Content-Length or Transfer-Encoding or the status is 1xx, 204 or 304;
// a HEAD request gets the same head without the body. A
// "Connection: close" line makes the origin close the connection after
// the answer.
func Respond(status int, body string, header ...string) Handler {
	return func(x *Exchange) {
		if _, err := x.ReadBody(); err != nil {
			x.CloseConn()
			return
		}
		var b strings.Builder
		b.WriteString(statusLine(status))
		framed := status < 200 || status == 204 || status == 304
		for _, h := range header {
			b.WriteString(h)
			b.WriteString("\r\n")
			name, value, _ := strings.Cut(h, ":")
			switch strings.ToLower(strings.TrimSpace(name)) {
			case "content-length", "transfer-encoding":
				framed = true
			case "connection":
				if strings.Contains(strings.ToLower(value), "close") {
					x.CloseConn()
				}
			}
		}
		if !framed {
			b.WriteString("Content-Length: " + strconv.Itoa(len(body)) + "\r\n")
		}
		b.WriteString("\r\n")
		if !bodiless(x.Req.Method, status) {
			b.WriteString(body)
		}
		if _, err := x.WriteString(b.String()); err != nil {
			x.CloseConn()
		}
	}
}

// Chunked answers 200 with a chunked body: one chunk per element of
// chunks, then the trailer lines ("Name: value"). A HEAD request gets
// the head alone.
func Chunked(chunks []string, trailer ...string) Handler {
	return func(x *Exchange) {
		if _, err := x.ReadBody(); err != nil {
			x.CloseConn()
			return
		}
		s := "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
		if x.Req.Method != "HEAD" {
			s += Chunk(chunks, trailer...)
		}
		if _, err := x.WriteString(s); err != nil {
			x.CloseConn()
		}
	}
}

// CloseDelimited answers with an HTTP/1.0 200 response with the header
// lines given and no Content-Length, whose body ends when the origin
// closes the connection.
func CloseDelimited(body string, header ...string) Handler {
	return func(x *Exchange) {
		x.CloseConn()
		if _, err := x.ReadBody(); err != nil {
			return
		}
		s := "HTTP/1.0 200 OK\r\n"
		for _, h := range header {
			s += h + "\r\n"
		}
		x.WriteString(s + "\r\n" + body)
	}
}

// Raw writes resp exactly as given, for malformed answers and framings
// the other handlers do not make. It does not read the request body
// first (the origin reads what is left after the handler, unless the
// connection is to close).
func Raw(resp string) Handler {
	return func(x *Exchange) {
		if _, err := x.WriteString(resp); err != nil {
			x.CloseConn()
		}
	}
}

// ThenClose runs h, then closes the connection without reading anything
// more, whatever h's answer said. Behind a keep-alive answer it makes a
// pooled upstream connection that is dead when next used.
func ThenClose(h Handler) Handler {
	return func(x *Exchange) {
		h(x)
		x.CloseConn()
	}
}

// Before writes raw (say, interim 1xx responses, each ending with an
// empty line) before the request body is read, then runs next.
func Before(raw string, next Handler) Handler {
	return func(x *Exchange) {
		if _, err := x.WriteString(raw); err != nil {
			x.CloseConn()
			return
		}
		next(x)
	}
}

// Continue sends "100 Continue", then runs next.
func Continue(next Handler) Handler {
	return Before("HTTP/1.1 100 Continue\r\n\r\n", next)
}

// Echo answers 200 with the request body, streamed back as it arrives:
// with the same Content-Length, or chunked (trailers echoed too) for a
// chunked request.
func Echo() Handler {
	return func(x *Exchange) {
		buf := make([]byte, 32<<10)
		body := x.Body()
		if x.cr == nil {
			n, _ := contentLength(x.Req.Header)
			if n < 0 || x.Req.Method == "HEAD" {
				n = 0
			}
			if _, err := x.WriteString(statusLine(200) + "Content-Length: " + strconv.FormatInt(n, 10) + "\r\n\r\n"); err != nil {
				x.CloseConn()
				return
			}
			for {
				m, err := body.Read(buf)
				if m > 0 {
					if _, werr := x.Write(buf[:m]); werr != nil {
						x.CloseConn()
						return
					}
				}
				if err == io.EOF {
					return
				}
				if err != nil {
					x.CloseConn()
					return
				}
			}
		}
		if _, err := x.WriteString(statusLine(200) + "Transfer-Encoding: chunked\r\n\r\n"); err != nil {
			x.CloseConn()
			return
		}
		var out []byte
		for {
			m, err := body.Read(buf)
			if m > 0 {
				out = appendChunk(out[:0], buf[:m])
				if _, werr := x.Write(out); werr != nil {
					x.CloseConn()
					return
				}
			}
			if err == io.EOF {
				break
			}
			if err != nil {
				x.CloseConn()
				return
			}
		}
		end := "0\r\n"
		for _, f := range x.Req.Trailer {
			end += f.Name + ": " + f.Value + "\r\n"
		}
		if _, err := x.WriteString(end + "\r\n"); err != nil {
			x.CloseConn()
		}
	}
}

// Hangup closes the connection as soon as the request head has arrived,
// without an answer.
func Hangup() Handler {
	return func(x *Exchange) { x.CloseConn() }
}

// Hang never answers: it reads and discards whatever arrives until the
// peer closes the connection or the origin is closed.
func Hang() Handler {
	return func(x *Exchange) {
		io.Copy(io.Discard, x.br)
		x.CloseConn()
	}
}

// Sequence answers the n-th request it handles (counted over all
// connections) with hs[n], and later requests with the last element.
func Sequence(hs ...Handler) Handler {
	var mu sync.Mutex
	n := 0
	return func(x *Exchange) {
		mu.Lock()
		i := min(n, len(hs)-1)
		n++
		mu.Unlock()
		hs[i](x)
	}
}
