package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"sync/atomic"
)

// Bodies served by the HTTP origin, by path.
var bodySizes = map[string]int{
	"/1k":  1 << 10,
	"/10k": 10 << 10,
	"/1m":  1 << 20,
	"/10m": 10 << 20,
}

// Limits of a request head.
const (
	maxLineBytes = 8 << 10
	maxHeaders   = 100
)

// response holds the prebuilt bytes of one body in its three connection
// variants, so a request costs one Write and no formatting.
type response struct {
	bodyLen   int
	keepAlive []byte // HTTP/1.1, persistent by default
	close     []byte // "Connection: close"
	keep10    []byte // answer to HTTP/1.0 with "Connection: keep-alive"
}

// origin serves the listeners. Its counters are updated atomically by
// every connection goroutine.
type origin struct {
	responses map[string]*response

	httpRequests atomic.Int64
	sinkBytes    atomic.Int64
	sinkConns    atomic.Int64
	holdConns    atomic.Int64 // currently open
	wsConns      atomic.Int64 // upgrades answered
	wsMessages   atomic.Int64 // data frames echoed

	dns dnsResponder // the DNS responder, with its query counter
}

func newOrigin() *origin {
	o := &origin{responses: map[string]*response{}}
	for path, n := range bodySizes {
		body := bytes.Repeat([]byte("0123456789abcdef"), n/16)
		build := func(extra string) []byte {
			h := "HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: " + strconv.Itoa(n) + "\r\n" + extra + "\r\n"
			return append([]byte(h), body...)
		}
		o.responses[path] = &response{
			bodyLen:   n,
			keepAlive: build(""),
			close:     build("Connection: close\r\n"),
			keep10:    build("Connection: keep-alive\r\n"),
		}
	}
	return o
}

// request is what serveHTTP keeps of a request head.
type request struct {
	method    string
	path      string
	http10    bool
	close     bool // "Connection: close", or HTTP/1.0 without keep-alive
	bodyBytes int64
	chunked   bool
}

// serveHTTP answers requests on c until the client closes it, asks for
// close, or sends something this small server does not handle.
func (o *origin) serveHTTP(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 4096)
	for {
		req, status := readRequest(br)
		if status != 0 {
			if status > 0 {
				writeError(c, status)
			}
			return
		}
		if req.chunked {
			writeError(c, 501)
			return
		}
		if req.bodyBytes > 0 {
			if _, err := io.CopyN(io.Discard, br, req.bodyBytes); err != nil {
				return
			}
		}
		o.httpRequests.Add(1)
		if req.path == "/_stats" {
			if err := o.writeStats(c); err != nil {
				return
			}
			continue
		}
		resp, ok := o.responses[req.path]
		if !ok {
			writeError(c, 404)
			return
		}
		b := resp.keepAlive
		switch {
		case req.close:
			b = resp.close
		case req.http10:
			b = resp.keep10
		}
		if req.method == "HEAD" {
			b = b[:len(b)-resp.bodyLen]
		}
		if _, err := c.Write(b); err != nil || req.close {
			return
		}
	}
}

// readRequest reads one request head. A non-zero status means no request:
// -1 when the connection ended or failed, or the HTTP status to answer
// with before closing.
func readRequest(br *bufio.Reader) (request, int) {
	var req request
	line, err := readLine(br)
	if err != nil {
		if err == bufio.ErrBufferFull {
			return req, 414
		}
		return req, -1
	}
	sp1 := bytes.IndexByte(line, ' ')
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp1 <= 0 || sp2 <= sp1 {
		return req, 400
	}
	req.method = string(line[:sp1])
	target := line[sp1+1 : sp2]
	switch string(line[sp2+1:]) {
	case "HTTP/1.1":
	case "HTTP/1.0":
		req.http10, req.close = true, true
	default:
		return req, 505
	}
	req.path = originPath(target)
	for i := 0; ; i++ {
		if i == maxHeaders {
			return req, 431
		}
		h, err := readLine(br)
		if err != nil {
			if err == bufio.ErrBufferFull {
				return req, 431
			}
			return req, -1
		}
		if len(h) == 0 {
			return req, 0
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return req, 400
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Connection")):
			for _, tok := range bytes.Split(value, []byte(",")) {
				tok = bytes.TrimSpace(tok)
				if bytes.EqualFold(tok, []byte("close")) {
					req.close = true
				} else if bytes.EqualFold(tok, []byte("keep-alive")) && req.http10 {
					req.close = false
				}
			}
		case bytes.EqualFold(name, []byte("Content-Length")):
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || n < 0 {
				return req, 400
			}
			req.bodyBytes = n
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			req.chunked = true
		}
	}
}

// readLine returns one line without its CRLF or LF. The slice is valid until
// the next read from br.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	line = line[:len(line)-1]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, nil
}

// originPath returns the path of a request target in origin form or
// absolute form, without its query.
func originPath(target []byte) string {
	if i := bytes.Index(target, []byte("://")); i >= 0 {
		rest := target[i+3:]
		slash := bytes.IndexByte(rest, '/')
		if slash < 0 {
			return "/"
		}
		target = rest[slash:]
	}
	if q := bytes.IndexByte(target, '?'); q >= 0 {
		target = target[:q]
	}
	// Known paths come from constants: no allocation per request for them.
	switch string(target) {
	case "/1k":
		return "/1k"
	case "/10k":
		return "/10k"
	case "/1m":
		return "/1m"
	case "/10m":
		return "/10m"
	}
	return string(target)
}

// writeError answers with an empty-bodied status and "Connection: close".
func writeError(c net.Conn, status int) {
	io.WriteString(c, "HTTP/1.1 "+strconv.Itoa(status)+" Error\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
}

// Stats is the JSON body of /_stats.
type Stats struct {
	HTTPRequests int64 `json:"http_requests"`
	SinkBytes    int64 `json:"sink_bytes"`
	SinkConns    int64 `json:"sink_conns"`
	HoldConns    int64 `json:"hold_conns"`
	WSConns      int64 `json:"ws_conns"`
	WSMessages   int64 `json:"ws_messages"`
	DNSQueries   int64 `json:"dns_queries"`
}

func (o *origin) stats() Stats {
	return Stats{
		HTTPRequests: o.httpRequests.Load(),
		SinkBytes:    o.sinkBytes.Load(),
		SinkConns:    o.sinkConns.Load(),
		HoldConns:    o.holdConns.Load(),
		WSConns:      o.wsConns.Load(),
		WSMessages:   o.wsMessages.Load(),
		DNSQueries:   o.dns.queries.Load(),
	}
}

// writeStats answers /_stats.
func (o *origin) writeStats(c net.Conn) error {
	body, err := json.Marshal(o.stats())
	if err != nil {
		return err
	}
	_, err = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "+strconv.Itoa(len(body))+"\r\n\r\n"+string(body))
	return err
}

// serveSink reads and discards everything c sends, counting the bytes.
func (o *origin) serveSink(c net.Conn) {
	defer c.Close()
	o.sinkConns.Add(1)
	buf := make([]byte, 256<<10)
	for {
		n, err := c.Read(buf)
		o.sinkBytes.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// serveHold echoes what c sends and otherwise keeps it open until the peer
// closes it. A small buffer keeps thousands of held connections cheap.
func (o *origin) serveHold(c net.Conn) {
	defer c.Close()
	o.holdConns.Add(1)
	defer o.holdConns.Add(-1)
	buf := make([]byte, 64)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
