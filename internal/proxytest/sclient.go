package proxytest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// SClient is OpenSSL's s_client connected to a TLS server, as a
// net.Conn: Write sends its bytes as application data, Read returns the
// server's. It runs interactively (-quiet -no_ign_eof) so that it takes
// its commands, which a Go client has no way to send: a line "k" or "K"
// sends a TLS 1.3 KeyUpdate ([SClient.KeyUpdate]). A write whose first
// byte is one of s_client's command letters (Q, R, k, K) is taken for a
// command, so write what does not start with one (a CONNECT line, TLS
// records) in one Write each. It logs the records it sends and receives
// (-msg) to a file, which [SClient.Received] reads.
type SClient struct {
	cmd    *exec.Cmd
	in     *os.File // s_client's stdin
	out    *os.File // its stdout
	msgs   string   // its -msgfile
	stderr *LogBuffer
	addr   net.Addr
}

// StartSClient starts s_client to the TLS server at addr, TLS 1.3 only,
// with args after its own (an -alpn), and waits for its handshake. It
// needs openssl (see RequireTool); the process is ended by t.Cleanup.
func StartSClient(t testing.TB, addr string, args ...string) *SClient {
	t.Helper()
	openssl := RequireTool(t, "openssl", "openssl")
	raddr, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatalf("proxytest: s_client to %s: %v", addr, err)
	}
	c := &SClient{msgs: filepath.Join(t.TempDir(), "s_client.msg"), stderr: &LogBuffer{}, addr: raddr}
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command(openssl, append([]string{"s_client", "-connect", addr, "-tls1_3",
		"-quiet", "-no_ign_eof", "-msg", "-msgfile", c.msgs}, args...)...)
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, c.stderr
	if err := c.cmd.Start(); err != nil {
		t.Fatalf("proxytest: start s_client: %v", err)
	}
	inR.Close()
	outW.Close()
	c.in, c.out = inW, outR
	t.Cleanup(func() {
		c.in.Close()
		c.out.Close()
		c.cmd.Process.Kill()
		c.cmd.Wait()
	})
	if err := c.await("Finished", ">>>", 1); err != nil {
		t.Fatalf("proxytest: s_client to %s: %v", addr, err)
	}
	return c
}

// Received reports how many handshake messages of the type typ (as
// s_client names them: "KeyUpdate", "NewSessionTicket") s_client has
// received so far.
func (c *SClient) Received(typ string) int { return countLines(c.read(), "<<<", typ) }

// countLines counts the lines of the -msg log b that start with dir and
// end with ", "+typ.
func countLines(b []byte, dir, typ string) int {
	n := 0
	for _, line := range bytes.Split(b, []byte("\n")) {
		if bytes.HasPrefix(line, []byte(dir+" ")) && bytes.HasSuffix(line, []byte(", "+typ)) {
			n++
		}
	}
	return n
}

// await waits, for DefaultTimeout, until s_client's log has want
// messages of the type typ in the direction dir.
func (c *SClient) await(typ, dir string, want int) error {
	deadline := time.Now().Add(DefaultTimeout)
	for countLines(c.read(), dir, typ) < want {
		if time.Now().After(deadline) {
			return fmt.Errorf("no %s %s after %v (s_client said: %s)", dir, typ, DefaultTimeout, c.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

func (c *SClient) read() []byte {
	b, _ := os.ReadFile(c.msgs)
	return b
}

// AwaitReceived waits, for DefaultTimeout, until s_client has received
// want handshake messages of the type typ in all, failing the test if
// it has not.
func (c *SClient) AwaitReceived(t testing.TB, typ string, want int) {
	t.Helper()
	if err := c.await(typ, "<<<", want); err != nil {
		t.Fatalf("proxytest: s_client: %v", err)
	}
}

// KeyUpdate has s_client send a KeyUpdate, which asks the server for one
// back when requested, and waits for it to be sent.
func (c *SClient) KeyUpdate(t testing.TB, requested bool) {
	t.Helper()
	sent := countLines(c.read(), ">>>", "KeyUpdate")
	cmd := "k\n"
	if requested {
		cmd = "K\n"
	}
	if _, err := c.in.WriteString(cmd); err != nil {
		t.Fatalf("proxytest: s_client: %v", err)
	}
	if err := c.await("KeyUpdate", ">>>", sent+1); err != nil {
		t.Fatalf("proxytest: s_client: %v", err)
	}
}

// Read reads what the server sent.
func (c *SClient) Read(p []byte) (int, error) { return c.out.Read(p) }

// Write sends p as application data (see SClient on command letters).
func (c *SClient) Write(p []byte) (int, error) { return c.in.Write(p) }

// Close closes s_client's input, on which it closes the connection.
func (c *SClient) Close() error { return c.in.Close() }

// LocalAddr returns nil: s_client's own address is not known.
func (c *SClient) LocalAddr() net.Addr { return nil }

// RemoteAddr returns the server's address.
func (c *SClient) RemoteAddr() net.Addr { return c.addr }

// SetDeadline sets the deadlines of the pipes to s_client.
func (c *SClient) SetDeadline(t time.Time) error {
	c.in.SetWriteDeadline(t)
	return c.out.SetReadDeadline(t)
}

// SetReadDeadline sets the deadline of reads from s_client.
func (c *SClient) SetReadDeadline(t time.Time) error { return c.out.SetReadDeadline(t) }

// SetWriteDeadline sets the deadline of writes to s_client.
func (c *SClient) SetWriteDeadline(t time.Time) error { return c.in.SetWriteDeadline(t) }
