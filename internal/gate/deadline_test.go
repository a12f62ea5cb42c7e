package gate_test

import (
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/gate"
)

func TestDeadline(t *testing.T) {
	now := time.Now()
	for _, d := range []time.Duration{0, -time.Second} {
		if got := gate.Deadline(now, d); !got.IsZero() {
			t.Errorf("Deadline(now, %v) = %v, want the zero time (no deadline)", d, got)
		}
	}
	if got := gate.Deadline(now, time.Second); !got.Equal(now.Add(time.Second)) {
		t.Errorf("Deadline(now, 1s) = %v, want %v", got, now.Add(time.Second))
	}
}
