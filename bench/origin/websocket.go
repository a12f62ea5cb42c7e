package main

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"io"
	"net"
)

// WebSocket framing (RFC 6455), the little of it an echo server needs.
const (
	wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA

	// maxWSPayload bounds one frame's payload: the benchmark sends at most
	// 64 KB.
	maxWSPayload = 1 << 20
	// wsHeadroom is the most bytes a server frame header takes: payloads
	// are read in after it, so header and payload leave in one write.
	wsHeadroom = 10
)

// errWSFrame is returned for a frame this echo server does not accept.
var errWSFrame = errors.New("origin: bad WebSocket frame")

// wsAccept returns the Sec-WebSocket-Accept value for a client key.
func wsAccept(key string) string {
	h := sha1.Sum([]byte(key + wsGUID))
	return base64.StdEncoding.EncodeToString(h[:])
}

// serveWS answers a WebSocket upgrade on c (any path) and then echoes every
// data frame back with the same opcode and FIN bit, answers pings with
// pongs, and ends after echoing a close frame. It is written by hand, like
// the HTTP origin, so that it costs the shared load core little: frames are
// read into a buffer that leaves room for the reply's header, unmasked in
// place (not at all for the all-zero mask key the load tool uses), and sent
// back with one write.
func (o *origin) serveWS(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 64<<10)
	key, status := readUpgrade(br)
	if status != 0 {
		if status > 0 {
			writeError(c, status)
		}
		return
	}
	resp := "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + wsAccept(key) + "\r\n\r\n"
	if _, err := io.WriteString(c, resp); err != nil {
		return
	}
	o.wsConns.Add(1)
	buf := make([]byte, wsHeadroom+4096)
	for {
		var err error
		var op byte
		var fin bool
		var n int
		op, fin, n, buf, err = readWSFrame(br, buf)
		if err != nil {
			return
		}
		payload := buf[wsHeadroom : wsHeadroom+n]
		switch op {
		case opPing:
			op = opPong
		case opPong:
			continue
		case opClose, opContinuation, opText, opBinary:
		default:
			return
		}
		if op != opClose && op != opPong {
			o.wsMessages.Add(1)
		}
		hl := putWSHeader(buf[:wsHeadroom], op, fin, n)
		if _, err := c.Write(buf[wsHeadroom-hl : wsHeadroom+len(payload)]); err != nil || op == opClose {
			return
		}
	}
}

// readUpgrade reads the request head of a WebSocket upgrade and returns
// the client's Sec-WebSocket-Key. A non-zero status means no upgrade: -1
// when the connection ended, or the HTTP status to answer with.
func readUpgrade(br *bufio.Reader) (string, int) {
	line, err := readLine(br)
	if err != nil {
		return "", -1
	}
	if !bytes.HasPrefix(line, []byte("GET ")) || !bytes.HasSuffix(line, []byte(" HTTP/1.1")) {
		return "", 400
	}
	var key string
	upgrade := false
	for i := 0; ; i++ {
		if i == maxHeaders {
			return "", 431
		}
		h, err := readLine(br)
		if err != nil {
			return "", -1
		}
		if len(h) == 0 {
			break
		}
		colon := bytes.IndexByte(h, ':')
		if colon <= 0 {
			return "", 400
		}
		name, value := h[:colon], bytes.TrimSpace(h[colon+1:])
		switch {
		case bytes.EqualFold(name, []byte("Upgrade")):
			upgrade = bytes.EqualFold(value, []byte("websocket"))
		case bytes.EqualFold(name, []byte("Sec-WebSocket-Key")):
			key = string(value)
		}
	}
	if !upgrade || key == "" {
		return "", 400
	}
	return key, 0
}

// readWSFrame reads one frame from br into buf[wsHeadroom:], growing buf
// when needed, and unmasks it. It returns the opcode, the FIN bit, the
// payload length and the (possibly new) buffer.
func readWSFrame(br *bufio.Reader, buf []byte) (op byte, fin bool, n int, _ []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, false, 0, buf, err
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0f
	masked := h[1]&0x80 != 0
	size := uint64(h[1] & 0x7f)
	switch size {
	case 126:
		var ext [2]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return 0, false, 0, buf, err
		}
		size = uint64(binary.BigEndian.Uint16(ext[:]))
	case 127:
		var ext [8]byte
		if _, err := io.ReadFull(br, ext[:]); err != nil {
			return 0, false, 0, buf, err
		}
		size = binary.BigEndian.Uint64(ext[:])
	}
	if size > maxWSPayload || h[0]&0x70 != 0 {
		return 0, false, 0, buf, errWSFrame
	}
	var mask [4]byte
	if masked {
		if _, err := io.ReadFull(br, mask[:]); err != nil {
			return 0, false, 0, buf, err
		}
	}
	n = int(size)
	if len(buf) < wsHeadroom+n {
		buf = make([]byte, wsHeadroom+n)
	}
	p := buf[wsHeadroom : wsHeadroom+n]
	if _, err := io.ReadFull(br, p); err != nil {
		return 0, false, 0, buf, err
	}
	if mask != [4]byte{} {
		for i := range p {
			p[i] ^= mask[i&3]
		}
	}
	return op, fin, n, buf, nil
}

// putWSHeader writes an unmasked server frame header for a payload of n
// bytes at the end of hdr (len wsHeadroom) and returns its length.
func putWSHeader(hdr []byte, op byte, fin bool, n int) int {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	switch {
	case n <= 125:
		hdr[8], hdr[9] = b0, byte(n)
		return 2
	case n <= 0xffff:
		hdr[6], hdr[7] = b0, 126
		binary.BigEndian.PutUint16(hdr[8:], uint16(n))
		return 4
	default:
		hdr[0], hdr[1] = b0, 127
		binary.BigEndian.PutUint64(hdr[2:], uint64(n))
		return 10
	}
}
