package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/textproto"
	"strings"
	"time"
)

// dialer opens tunnels to one target, through a proxy or straight.
type dialer struct {
	// proxy is the proxy's host:port; "" connects straight to target.
	proxy string
	// authHeader is the Proxy-Authorization value; "" sends none.
	authHeader string
	target     string
	timeout    time.Duration
}

func newDialer(proxy, userPass, target string, timeout time.Duration) dialer {
	d := dialer{proxy: proxy, target: target, timeout: timeout}
	if userPass != "" {
		d.authHeader = "Basic " + base64.StdEncoding.EncodeToString([]byte(userPass))
	}
	return d
}

// tunnelConn is an established tunnel. Reads drain what the reader of the
// CONNECT response buffered first.
type tunnelConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *tunnelConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// errStatus is returned when the proxy answers CONNECT with a status other
// than 200.
var errStatus = errors.New("load: CONNECT refused")

// dial opens one tunnel: a TCP connection to the proxy, CONNECT and a 200
// answer, or a plain TCP connection to the target without a proxy.
func (d dialer) dial(ctx context.Context) (*tunnelConn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	var nd net.Dialer
	addr := d.target
	if d.proxy != "" {
		addr = d.proxy
	}
	c, err := nd.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", addr, err)
	}
	tc := &tunnelConn{Conn: c, r: bufio.NewReaderSize(c, 512)}
	if d.proxy == "" {
		return tc, nil
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req := "CONNECT " + d.target + " HTTP/1.1\r\nHost: " + d.target + "\r\n"
	if d.authHeader != "" {
		req += "Proxy-Authorization: " + d.authHeader + "\r\n"
	}
	req += "\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		c.Close()
		return nil, fmt.Errorf("send CONNECT %s to %s: %w", d.target, d.proxy, err)
	}
	tp := textproto.NewReader(tc.r)
	status, err := tp.ReadLine()
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("read CONNECT answer from %s: %w", d.proxy, err)
	}
	if _, err := tp.ReadMIMEHeader(); err != nil {
		c.Close()
		return nil, fmt.Errorf("read CONNECT answer headers from %s: %w", d.proxy, err)
	}
	f := strings.Fields(status)
	if len(f) < 2 || f[1] != "200" {
		c.Close()
		return nil, fmt.Errorf("%w: %q", errStatus, status)
	}
	c.SetDeadline(time.Time{})
	return tc, nil
}
