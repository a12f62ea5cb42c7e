package report

import "testing"

// TestSlowedRule checks the memory loop's threshold: a run is Slowed when
// its loop took more than SlowedFactor times the campaign's fastest, and
// never where either was not measured.
func TestSlowedRule(t *testing.T) {
	at := SlowedFactor * 70 // the slowest loop that is not Slowed when the fastest took 70 ms
	for _, tt := range []struct {
		name           string
		loopMS, fastMS float64
		want           bool
	}{
		{"the fastest itself", 70, 70, false},
		{"usual pace", 75, 70, false},
		{"at the threshold", at, 70, false},
		{"just above", at + 0.5, 70, true},
		{"a slow spell", 105, 70, true},
		{"no loop", 0, 70, false},
		{"no fastest yet", 105, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Slowed(tt.loopMS, tt.fastMS); got != tt.want {
				t.Errorf("Slowed(%v, %v) = %v, want %v", tt.loopMS, tt.fastMS, got, tt.want)
			}
		})
	}
}

// TestSlowedMarked checks that a rate with a Slowed run gets MarkSlowed
// beside its proxy core's busy % in the core-load table, that the
// procedure says what the memory loop is once a run has one, and that
// neither appears otherwise. The CPU figure itself stands, compared as
// before: the retries are what keep slow runs out.
func TestSlowedMarked(t *testing.T) {
	for _, tt := range []struct {
		name            string
		loopMS          float64
		slowed          bool
		wants, unwanted []string
	}{
		{
			name:     "no memory loop",
			wants:    []string{"| wss at 20,000/s | rustle | 20,000/s ✓ | 20,000/s | 50 % | 60 % | 0 % |"},
			unwanted: []string{"% § |", "load memloop"},
		},
		{
			name: "measured, not slowed", loopMS: 90,
			wants:    []string{"| wss at 20,000/s | rustle | 20,000/s ✓ | 20,000/s | 50 % | 60 % | 0 % |", "load memloop; runs.json's memory_loop_ms"},
			unwanted: []string{"% § |"},
		},
		{
			name: "slowed", loopMS: 120, slowed: true,
			wants: []string{
				"| wss at 20,000/s | rustle | 20,000/s ✓ | 20,000/s | 50 % § | 60 % | 0 % |",
				"| wss at 20,000/s | gost | 20,000/s ✓ | 20,000/s | 50 % | 60 % | 0 % |",
				"| at 20,000 msg/s: CPU per message | µs/msg | 20.0 | 30.0 | 1.5× less |",
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := loadBoundCampaign(60, 0, 60)
			c.Runs[0].MemoryLoopMS = tt.loopMS
			c.Runs[0].Slowed = tt.slowed
			markdownHas(t, c, tt.wants, tt.unwanted)
		})
	}
}
