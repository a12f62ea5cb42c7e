package tunnel

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRecordConnTLSParker checks a TLS connection inside another
// (RecordConnTLS, an intercepted tunnel that came by a CONNECT on the
// https port) and its Parker (RecordParker), which waits on the outer
// connection's socket: the Parker does not wait while bytes wait above
// the socket, the outer connection's plaintext left by a reader before
// (not known to be drained until read once) or inner records that came
// in one outer record behind the one read; it waits, and wakes (Notify,
// WaitRead) once the client sends, when nothing is held; and no buffer
// is held once the bytes are read.
func TestRecordConnTLSParker(t *testing.T) {
	serverConf, clientConf := tlsConfs(t, 0)
	client, server, _ := tlsHandshake(t, newListener(t), serverConf, clientConf, false)
	t.Cleanup(func() { client.Close(); server.Close() })
	deadline := time.Now().Add(20 * time.Second)
	server.SetDeadline(deadline)
	under := server.NetConn().(*recordConn)

	// The inner TLS connection's client writes through a connection
	// that can send several writes in one (one outer record): its
	// ClientHello goes behind "abc" (a CONNECT's place), which the outer
	// connection's reader reads: the hello stays in crypto/tls, above
	// the empty socket.
	hc := &holdConn{Conn: client, hold: true, buf: []byte("abc"), held: make(chan struct{}, 1)}
	inClient := tls.Client(hc, clientConf)
	errc := make(chan error, 2)
	go func() { errc <- inClient.Handshake() }()
	<-hc.held
	if err := hc.flush(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	if n, err := server.Read(buf[:3]); string(buf[:n]) != "abc" || err != nil {
		t.Fatalf("outer read = %q, %v; want \"abc\"", buf[:n], err)
	}
	nc := RecordConnTLS(server, nil)
	if nc == nil {
		t.Fatal("RecordConnTLS: nil for a TLS connection over RecordConn")
	}
	nested := nc.(*recordConn)
	p, ok := RecordParker(nc)
	if !ok {
		t.Fatal("RecordParker: not a RecordConn")
	}
	ready := func(want bool, when string) {
		t.Helper()
		if got, err := p.Ready(); got != want || err != nil {
			t.Fatalf("%s: Ready = %v, %v; want %v", when, got, err, want)
		}
	}
	ready(true, "the outer connection holding the inner ClientHello")
	inServer := tls.Server(nc, serverConf)
	go func() { errc <- inServer.Handshake() }()
	if err := errors.Join(<-errc, <-errc); err != nil {
		t.Fatalf("inner TLS handshake: %v", err)
	}
	ready(false, "the handshake done")
	hc.mu.Lock()
	hc.hold = true
	hc.mu.Unlock()
	inClient.Write([]byte("one"))
	inClient.Write([]byte("two"))
	if err := hc.flush(); err != nil {
		t.Fatal(err)
	}
	read := func(want string) {
		t.Helper()
		if n, err := inServer.Read(buf); string(buf[:n]) != want || err != nil {
			t.Fatalf("inner read = %q, %v; want %q", buf[:n], err, want)
		}
	}
	read("one")
	ready(true, "an inner record read ahead behind the one read")
	read("two")
	ready(false, "both inner records read")
	if nested.ahead != nil || under.ahead != nil {
		t.Fatal("a read-ahead buffer is held with nothing to read")
	}

	woke := make(chan error, 1)
	n, ok := p.Notify(deadline, func(err error) { woke <- err })
	if !ok {
		t.Fatal("Notify reported no wait on Linux")
	}
	select {
	case err := <-woke:
		t.Fatalf("Notify called with %v before the client sent", err)
	case <-time.After(50 * time.Millisecond):
	}
	inClient.Write([]byte("three"))
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("Notify called with %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		n.Wake()
		t.Fatal("Notify not called once the client sent")
	}
	read("three")

	go inClient.Write([]byte("four"))
	if err := p.WaitRead(); err != nil {
		t.Fatalf("WaitRead = %v", err)
	}
	read("four")
	if nested.ahead != nil || under.ahead != nil {
		t.Fatal("a read-ahead buffer is held with nothing to read")
	}
}

// holdConn keeps what is written to it while hold is set, to send it in
// one write on flush: the records written meanwhile go in one record of
// the TLS connection under it. A write kept is signalled on held, when
// set. It is proxytest.HoldConn, which this package's tests cannot
// import (proxytest imports tunnel).
type holdConn struct {
	net.Conn
	mu   sync.Mutex
	hold bool
	buf  []byte
	held chan struct{}
}

func (c *holdConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.hold {
		c.buf = append(c.buf, p...)
		if c.held != nil {
			select {
			case c.held <- struct{}{}:
			default:
			}
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// flush sends what was kept, in one write, and stops keeping.
func (c *holdConn) flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.hold = false
	_, err := c.Conn.Write(c.buf)
	c.buf = nil
	return err
}

// TestRecordConnTLSNotifyNoPlaintext checks Notify on the Parker of a
// TLS connection inside another (RecordConnTLS) whose outer client,
// OpenSSL's s_client, sends records that make no plaintext: a KeyUpdate,
// and one that asks for one back, which the outer connection answers.
// The wait is not ended by them (its function is not called) and goes on
// holding no buffer; it ends once the client sends an inner record,
// whose bytes are read then; a wait that saw a KeyUpdate still ends at
// its deadline, and by Wake.
func TestRecordConnTLSNotifyNoPlaintext(t *testing.T) {
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("openssl is missing (scripts/deps.sh installs it)")
		}
		t.Skip("openssl is not installed")
	}
	ln := tlsListener(t)
	serverConf, _ := tlsConfs(t, 0)
	msgs := filepath.Join(t.TempDir(), "s_client.msg")
	cmd := exec.Command(openssl, "s_client", "-connect", ln.Addr().String(), "-tls1_3",
		"-quiet", "-no_ign_eof", "-msg", "-msgfile", msgs)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	raw, err := ln.AcceptTCP()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	server := tls.Server(RecordConn(raw), serverConf)
	deadline := time.Now().Add(20 * time.Second)
	server.SetDeadline(deadline)
	if err := server.Handshake(); err != nil {
		t.Fatalf("handshake with s_client: %v", err)
	}
	under := server.NetConn().(*recordConn)
	nc := RecordConnTLS(server, nil)
	nested := nc.(*recordConn)
	p, ok := RecordParker(nc)
	if !ok {
		t.Fatal("RecordParker: not a RecordConn")
	}
	// count counts the handshake messages of the type typ s_client has
	// sent (dir ">>>") or received ("<<<"); await waits for want.
	count := func(dir, typ string) int {
		b, _ := os.ReadFile(msgs)
		n := 0
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, dir+" ") && strings.HasSuffix(line, ", "+typ) {
				n++
			}
		}
		return n
	}
	await := func(dir, typ string, want int) {
		t.Helper()
		for count(dir, typ) < want {
			if time.Now().After(deadline) {
				t.Fatalf("s_client: no %s %s", dir, typ)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// An inner record, as s_client's input: it starts with its type
	// (23), never one of s_client's command letters.
	inner := func(s string) string { return string([]byte{23, 3, 3, 0, byte(len(s))}) + s }
	send := func(s string) {
		t.Helper()
		if _, err := io.WriteString(stdin, s); err != nil {
			t.Fatal(err)
		}
	}
	read := func(want string) {
		t.Helper()
		buf := make([]byte, 64)
		n, err := io.ReadFull(nc, buf[:len(want)])
		if string(buf[:n]) != want || err != nil {
			t.Fatalf("read = %q, %v; want %q", buf[:n], err, want)
		}
	}
	// keyUpdates has s_client send a KeyUpdate, then one that asks for
	// one back: the answer says that the server has read both.
	keyUpdates := func() {
		t.Helper()
		got := count("<<<", "KeyUpdate")
		for _, cmd := range []string{"k\n", "K\n"} {
			sent := count(">>>", "KeyUpdate")
			send(cmd) // s_client drops what follows a command in a block
			await(">>>", "KeyUpdate", sent+1)
		}
		await("<<<", "KeyUpdate", got+1)
	}
	// waitingAgain waits until n's socket is registered again after
	// the wake the KeyUpdates brought; then no buffer may be held. The
	// buffers are looked at under n.w.mu, with no look at the socket
	// under way (none starts without n.w.mu).
	waitingAgain := func(n *Notice) {
		t.Helper()
		for {
			n.w.mu.Lock()
			// n.id is written under the notifier's lock (add, and remove,
			// which Fire calls without n.w.mu), taken inside n.w.mu as
			// settle does.
			notices.mu.Lock()
			registered := n.id != 0
			notices.mu.Unlock()
			again, fired := registered && !n.w.settling, n.w.fired.Load()
			held := again && (nested.ahead != nil || under.ahead != nil)
			n.w.mu.Unlock()
			switch {
			case fired:
				t.Fatal("the KeyUpdates ended the wait")
			case again && held:
				t.Fatal("a read-ahead buffer is held with nothing to read")
			case again:
				return
			case time.Now().After(deadline):
				t.Fatal("the wait was not registered again after the KeyUpdates")
			}
			time.Sleep(time.Millisecond)
		}
	}

	send(inner("one"))
	read(inner("one"))

	woke := make(chan error, 1)
	n, _ := p.Notify(deadline, func(err error) { woke <- err })
	keyUpdates()
	waitingAgain(n)
	send(inner("two"))
	select {
	case err := <-woke:
		if err != nil {
			t.Fatalf("Notify called with %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		n.Wake()
		t.Fatal("Notify not called once the client sent")
	}
	read(inner("two"))

	n, _ = p.Notify(time.Now().Add(500*time.Millisecond), func(err error) { woke <- err })
	keyUpdates()
	if err := <-woke; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Notify called with %v, want its deadline's error", err)
	}

	n, _ = p.Notify(deadline, func(err error) { woke <- err })
	keyUpdates()
	waitingAgain(n)
	n.Wake()
	if err := <-woke; !errors.Is(err, ErrWoken) {
		t.Fatalf("Notify called with %v after Wake, want ErrWoken", err)
	}
	send(inner("three"))
	read(inner("three"))
}
