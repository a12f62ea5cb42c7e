package http1

import (
	"errors"
	"net"
	"os"
	"testing"
	"time"
)

// TestDeadlineSlack checks when a Conn re-arms a deadline: not while
// the one armed falls within the slack before the wanted one, always when
// it would fire later than wanted or too early.
func TestDeadlineSlack(t *testing.T) {
	const timeout = 8 * time.Second // slack 0.5 s
	tests := []struct {
		name    string
		armed   time.Duration // rdl before the call; 0 = none
		now     time.Duration
		timeout time.Duration
		want    time.Duration // rdl after the call
	}{
		{"none armed", 0, time.Second, timeout, 9 * time.Second},
		{"within the slack", 9 * time.Second, 1400 * time.Millisecond, timeout, 9 * time.Second},
		{"past the slack", 9 * time.Second, 1600 * time.Millisecond, timeout, 9600 * time.Millisecond},
		{"shorter timeout", 9 * time.Second, time.Second, time.Second, 2 * time.Second},
		{"armed later than wanted", 20 * time.Second, time.Second, timeout, 9 * time.Second},
		{"no limit clears", 9 * time.Second, time.Second, 0, noDeadline},
		{"no limit, none known", 0, time.Second, 0, noDeadline},
		{"limit after none", noDeadline, time.Second, timeout, 9 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			bc := Conn{C: a, rdl: tt.armed, wdl: tt.armed}
			bc.ArmReadDeadline(tt.now, tt.timeout)
			bc.ArmWriteDeadline(tt.now, tt.timeout)
			if bc.rdl != tt.want || bc.wdl != tt.want {
				t.Errorf("armed read %v, write %v; want %v", bc.rdl, bc.wdl, tt.want)
			}
		})
	}
}

// TestDeadlineFires checks that a deadline armed through the cache takes
// effect, and one forgotten is armed again.
func TestDeadlineFires(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	bc := Conn{C: a, Buf: make([]byte, 16)}
	bc.ArmReadDeadline(MonoNow(), 50*time.Millisecond)
	start := time.Now()
	if err := bc.Fill(16); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("fill = %v, want a deadline error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("deadline fired after %v", d)
	}
	// Cleared behind the cache's back and forgotten (as finishBody
	// does): armed anew.
	a.SetReadDeadline(time.Time{})
	bc.rdl = 0
	bc.ArmReadDeadline(MonoNow(), 50*time.Millisecond)
	if err := bc.Fill(16); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("fill after forgetting = %v, want a deadline error", err)
	}
}

// TestZeroTimeoutNoDeadline checks that a timeout of 0 arms no deadline
// (rather than one that has already passed) and clears one armed before.
func TestZeroTimeoutNoDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	bc := Conn{C: a, Buf: make([]byte, 16)}
	bc.ArmReadDeadline(MonoNow(), time.Hour)
	bc.ArmReadDeadline(MonoNow(), 0)
	bc.ArmWriteDeadline(MonoNow(), 0)
	go func() {
		time.Sleep(50 * time.Millisecond)
		b.Write([]byte("x"))
		buf := make([]byte, 1)
		b.Read(buf)
	}()
	if err := bc.Fill(16); err != nil {
		t.Fatalf("fill with no deadline = %v", err)
	}
	if _, err := bc.C.Write([]byte("y")); err != nil {
		t.Fatalf("write with no deadline = %v", err)
	}
}
