package leaktest

import (
	"strings"
	"testing"
	"time"
)

// parkedForLeaktest blocks until stop is closed; its name is what the
// test looks for in the stacks.
func parkedForLeaktest(started chan<- struct{}, stop <-chan struct{}, done chan<- struct{}) {
	close(started)
	<-stop
	close(done)
}

func TestCheck(t *testing.T) {
	started, stop, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go parkedForLeaktest(started, stop, done)
	<-started
	err := Check(50*time.Millisecond, "parkedForLeaktest")
	if err == nil || !strings.Contains(err.Error(), "1 goroutine(s) still running") {
		t.Fatalf("Check with a goroutine running = %v, want it reported", err)
	}
	close(stop)
	<-done
	if err := Check(5*time.Second, "parkedForLeaktest"); err != nil {
		t.Fatalf("Check after the goroutine ended: %v", err)
	}
	if got := Stacks("no goroutine mentions this"); len(got) != 0 {
		t.Fatalf("Stacks found %d goroutines for a name nobody has", len(got))
	}
}
