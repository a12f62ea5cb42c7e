package sdnotify

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fakeSystemd listens on a unixgram socket at name (a path, or an
// @abstract name), points NOTIFY_SOCKET at it and returns it.
func fakeSystemd(t *testing.T, name string) *net.UnixConn {
	t.Helper()
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		t.Fatalf("listen on %s: %v", name, err)
	}
	t.Cleanup(func() { c.Close() })
	t.Setenv("NOTIFY_SOCKET", name)
	return c
}

// receive reads one datagram.
func receive(t *testing.T, c *net.UnixConn) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read notification: %v", err)
	}
	return string(buf[:n])
}

func TestMessages(t *testing.T) {
	c := fakeSystemd(t, filepath.Join(t.TempDir(), "notify.sock"))
	tests := []struct {
		name string
		send func() error
		want string
	}{
		{"Ready", Ready, "READY=1"},
		{"Stopping", Stopping, "STOPPING=1"},
		{"Status", func() error { return Status("serving 2 listeners") }, "STATUS=serving 2 listeners"},
		{"Status with newlines", func() error { return Status("a\nb\r\nc\rd") }, "STATUS=a b c d"},
		{"ExtendTimeout", func() error { return ExtendTimeout(1500 * time.Millisecond) }, "EXTEND_TIMEOUT_USEC=1500000"},
		{"Notify", func() error { return Notify("WATCHDOG=1\nSTATUS=x") }, "WATCHDOG=1\nSTATUS=x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.send(); err != nil {
				t.Fatal(err)
			}
			if got := receive(t, c); got != tt.want {
				t.Errorf("sent %q, want %q", got, tt.want)
			}
		})
	}
}

// TestReloading checks RELOADING=1 and that MONOTONIC_USEC is the
// monotonic clock now, as Type=notify-reload requires.
func TestReloading(t *testing.T) {
	c := fakeSystemd(t, filepath.Join(t.TempDir(), "notify.sock"))
	before := monotonicUsec()
	if err := Reloading(); err != nil {
		t.Fatal(err)
	}
	after := monotonicUsec()
	got := receive(t, c)
	lines := strings.Split(got, "\n")
	if len(lines) != 2 || lines[0] != "RELOADING=1" || !strings.HasPrefix(lines[1], "MONOTONIC_USEC=") {
		t.Fatalf("sent %q, want RELOADING=1 and MONOTONIC_USEC=", got)
	}
	v, err := strconv.ParseInt(strings.TrimPrefix(lines[1], "MONOTONIC_USEC="), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if before <= 0 || v < before || v > after {
		t.Errorf("MONOTONIC_USEC=%d, want between %d and %d", v, before, after)
	}
}

func TestAbstractSocket(t *testing.T) {
	name := fmt.Sprintf("@rustle-sdnotify-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	c := fakeSystemd(t, name)
	if err := Ready(); err != nil {
		t.Fatalf("Ready to %s: %v", name, err)
	}
	if got := receive(t, c); got != "READY=1" {
		t.Errorf("sent %q, want READY=1", got)
	}
}

func TestUnset(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	os.Unsetenv("NOTIFY_SOCKET")
	for name, f := range map[string]func() error{"Ready": Ready, "Reloading": Reloading, "Stopping": Stopping} {
		if err := f(); err != nil {
			t.Errorf("%s without NOTIFY_SOCKET = %v, want nil", name, err)
		}
	}
}

func TestBadSocket(t *testing.T) {
	for _, sock := range []string{"vsock:2:1234", "relative/notify.sock"} {
		t.Setenv("NOTIFY_SOCKET", sock)
		if err := Ready(); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Ready with NOTIFY_SOCKET=%s = %v, want ErrUnsupported", sock, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing.sock")
	t.Setenv("NOTIFY_SOCKET", missing)
	if err := Ready(); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("Ready to a missing socket = %v, want an error naming it", err)
	}
}
