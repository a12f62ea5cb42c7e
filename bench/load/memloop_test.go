package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestMemLoopPrintsItsTime checks that "load memloop" prints one line,
// a MemLoopResult with the loop's time (a small array and few reads, so
// that the test is quick), and refuses sizes below 1.
func TestMemLoopPrintsItsTime(t *testing.T) {
	tests := []struct {
		name string
		args []string
		ok   bool
	}{
		{"small", []string{"-mb", "1", "-reads", "100000"}, true},
		{"no array", []string{"-mb", "0"}, false},
		{"no reads", []string{"-reads", "0"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := memLoopTo(&out, tt.args)
			if !tt.ok {
				if err == nil {
					t.Fatalf("load memloop %v: no error, printed %q", tt.args, out.String())
				}
				return
			}
			if err != nil {
				t.Fatalf("load memloop %v: %v", tt.args, err)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			var r MemLoopResult
			if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &r) != nil || !(r.MS > 0) {
				t.Fatalf("load memloop %v printed %q, want one MemLoopResult line with a time above 0", tt.args, out.String())
			}
		})
	}
}
