package route

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzConnectReply reads an HTTP parent's CONNECT answer as Dial does:
// readHead never reads past the head's empty line, and ParseConnectReply
// returns a three-digit status or an error.
func FuzzConnectReply(f *testing.F) {
	f.Add([]byte("HTTP/1.1 200 Connection established\r\n\r\nrest"))
	f.Add([]byte("HTTP/1.0 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic\r\n\r\n"))
	f.Add([]byte("HTTP/1.1 200\n\n"))
	f.Add([]byte("HTTP/2 200\r\n\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		head, err := readHead(r, maxReplyHead)
		if err != nil {
			return
		}
		if !bytes.HasPrefix(b, head) || !bytes.HasSuffix(head, []byte("\n\n")) && !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
			t.Fatalf("head %q is not a prefix of the input ending at an empty line", head)
		}
		if r.Len() != len(b)-len(head) {
			t.Fatalf("read %d bytes past the head", len(b)-len(head)-r.Len())
		}
		if i := bytes.Index(head, []byte("\n\n")); i >= 0 && i+2 < len(head) {
			t.Fatalf("head %q runs past its first empty line", head)
		}
		status, err := ParseConnectReply(head)
		if err == nil && (status < 100 || status > 999) {
			t.Fatalf("status %d", status)
		}
	})
}

// FuzzSOCKS5Reply reads a SOCKS5 reply: never past its bound address, and
// a malformed one is an error.
func FuzzSOCKS5Reply(f *testing.F) {
	f.Add([]byte{5, 0, 0, 1, 127, 0, 0, 1, 0x1f, 0x90, 'h', 'i'})
	f.Add([]byte{5, 5, 0, 3, 4, 'h', 'o', 's', 't', 0, 80})
	f.Add([]byte{5, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 80})
	f.Add([]byte{4, 90, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		rep, err := ReadSOCKS5Reply(r)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
				t.Fatalf("error %v is neither a protocol error nor a short read", err)
			}
			return
		}
		n := len(b) - r.Len()
		want := 4 + 2
		switch b[3] {
		case atypIPv4:
			want += 4
		case atypIPv6:
			want += 16
		case atypDomain:
			want += 1 + int(b[4])
		}
		if n != want || b[0] != 5 || rep != b[1] {
			t.Fatalf("read %d bytes of %x, want %d", n, b, want)
		}
	})
}
