package proxytest

import (
	"errors"
	"net"
	"strconv"
	"sync"
)

// Framing is how a [Bulk] response delimits its body.
type Framing int

// The framings of a Bulk body.
const (
	// ByLength sends a Content-Length.
	ByLength Framing = iota
	// ByChunks sends a chunked body of BulkChunk-byte chunks.
	ByChunks
	// ByClose sends an HTTP/1.0 response without Content-Length, whose
	// body ends when the origin closes the connection.
	ByClose
)

// BulkChunk is the size of the writes of a Bulk body, and of its chunks
// when it is chunked: each chunk is "4000\r\n", 16 KiB of data and
// "\r\n".
const BulkChunk = 16 << 10

// BulkChunkFraming is the framing bytes around each chunk of a chunked
// Bulk body.
const BulkChunkFraming = len("4000\r\n") + len("\r\n")

// Bulk answers 200 with a body of size bytes (a multiple of BulkChunk),
// framed as framing says, written BulkChunk bytes at a time as the peer
// takes them: a large download whose client may stop reading part way.
// It does not read a request body first. A HEAD request gets the head
// alone.
func Bulk(size int64, framing Framing) Handler {
	data := make([]byte, BulkChunk)
	for i := range data {
		data[i] = "0123456789abcdef"[i%16]
	}
	chunk := append(append([]byte("4000\r\n"), data...), "\r\n"...)
	return func(x *Exchange) {
		var head string
		body := data
		switch framing {
		case ByLength:
			head = "HTTP/1.1 200 OK\r\nContent-Length: " + strconv.FormatInt(size, 10) + "\r\n\r\n"
		case ByChunks:
			head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
			body = chunk
		default:
			x.CloseConn()
			head = "HTTP/1.0 200 OK\r\n\r\n"
		}
		if _, err := x.WriteString(head); err != nil || x.Req.Method == "HEAD" {
			x.CloseConn()
			return
		}
		for left := size; left > 0; left -= BulkChunk {
			if _, err := x.Write(body); err != nil {
				x.CloseConn()
				return
			}
		}
		if framing == ByChunks {
			if _, err := x.WriteString("0\r\n\r\n"); err != nil {
				x.CloseConn()
			}
		}
	}
}

// ErrCut is the error of a write to a [Cut] connection past its limit.
var ErrCut = errors.New("proxytest: connection cut")

// Cut returns c wrapped so that it takes limit bytes of writes in all,
// then fails: the write that reaches the limit writes what fits, closes
// c and returns ErrCut, as a client that goes away part way through a
// response would make it. The peer reads exactly limit bytes, then the
// end of the stream. The wrapper is no *net.TCPConn, so a proxy serving
// it writes as it does to a TLS connection.
func Cut(c net.Conn, limit int64) net.Conn {
	return &cutConn{Conn: c, left: limit}
}

type cutConn struct {
	net.Conn
	mu   sync.Mutex
	left int64 // guarded by mu
}

func (c *cutConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if int64(len(p)) <= c.left {
		n, err := c.Conn.Write(p)
		c.left -= int64(n)
		return n, err
	}
	n, err := c.Conn.Write(p[:c.left])
	c.left -= int64(n)
	c.Conn.Close()
	if err == nil {
		err = ErrCut
	}
	return n, err
}
