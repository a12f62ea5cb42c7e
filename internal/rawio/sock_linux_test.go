package rawio

import (
	"syscall"
	"testing"
)

// TestPeekQueuedSetsockopt checks the raw calls against what the kernel
// reports through ordinary ones: Peek reads without taking, Queued
// counts what is queued, SetsockoptInt sets what getsockopt reads back,
// and each answers EAGAIN or the kernel's error as its ordinary form
// does.
func TestPeekQueuedSetsockopt(t *testing.T) {
	c, p := loopback(t)
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	do := func(f func(fd uintptr)) {
		t.Helper()
		if err := rc.Control(f); err != nil {
			t.Fatal(err)
		}
	}
	do(func(fd uintptr) {
		b := make([]byte, 4)
		if n, e := Peek(fd, b); e != syscall.EAGAIN || n != 0 {
			t.Errorf("Peek on an empty socket = %d, %v; want 0, EAGAIN", n, e)
		}
		if n, e := Queued(fd); e != 0 || n != 0 {
			t.Errorf("Queued on an empty socket = %d, %v; want 0", n, e)
		}
	})
	if _, err := p.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	// The bytes arrive on loopback by the time Write returns, but let
	// the poller say so.
	var got []byte
	if err := rc.Read(func(fd uintptr) bool {
		b := make([]byte, 4)
		n, e := Peek(fd, b)
		got = b[:n]
		return e != syscall.EAGAIN
	}); err != nil {
		t.Fatal(err)
	}
	if string(got) != "hell" {
		t.Errorf("Peek = %q; want %q", got, "hell")
	}
	do(func(fd uintptr) {
		if n, e := Queued(fd); e != 0 || n != 5 {
			t.Errorf("Queued after a peek = %d, %v; want all 5 bytes", n, e)
		}
		if e := SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 64<<10); e != 0 {
			t.Fatalf("SetsockoptInt(SO_RCVBUF) = %v", e)
		}
		// Linux doubles the size it is given, for its bookkeeping.
		if v, err := syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF); err != nil || v != 128<<10 {
			t.Errorf("SO_RCVBUF after SetsockoptInt(64 KiB) = %d, %v; want %d", v, err, 128<<10)
		}
		if e := SetsockoptInt(fd, syscall.SOL_SOCKET, -1, 1); e != syscall.ENOPROTOOPT {
			t.Errorf("SetsockoptInt of no such option = %v; want ENOPROTOOPT", e)
		}
	})
}
