package report

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestMedian(t *testing.T) {
	tests := []struct {
		name string
		in   []float64
		want float64
		ok   bool
	}{
		{"empty", nil, 0, false},
		{"one", []float64{7}, 7, true},
		{"odd unsorted", []float64{3, 1, 2}, 2, true},
		{"even", []float64{4, 1, 3, 2}, 2.5, true},
		{"outlier", []float64{100, 101, 5000}, 101, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]float64(nil), tt.in...)
			got, ok := Median(tt.in)
			if got != tt.want || ok != tt.ok {
				t.Errorf("Median(%v) = %v, %v; want %v, %v", tt.in, got, ok, tt.want, tt.ok)
			}
			if diff := cmp.Diff(in, tt.in); diff != "" {
				t.Errorf("Median modified its input (-before +after):\n%s", diff)
			}
		})
	}
}

func TestRatio(t *testing.T) {
	tests := []struct {
		a, b float64
		want string
	}{
		{55258, 15140, "3.6× more"},
		{18.1, 66.0, "3.6× less"},
		{14, 150, "11× less"},
		{40, 275, "6.9× less"},
		{54, 432, "8.0× less"},
		{22.0, 13.6, "1.6× more"},
		{95, 912, "9.6× less"},
		{2624, 353, "7.4× more"},
		{9.96, 1, "10× more"},
		{1, 1, "1.0× more"},
		{0, 5, "n/a"},
		{5, 0, "n/a"},
		{-1, 5, "n/a"},
	}
	for _, tt := range tests {
		if got := Ratio(tt.a, tt.b); got != tt.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", tt.a, tt.b, got, tt.want)
		}
	}
}

func TestFormatValue(t *testing.T) {
	tests := []struct {
		v    float64
		dec  int
		want string
	}{
		{55258.4, 0, "55,258"},
		{999.5, 0, "1,000"},
		{12, 0, "12"},
		{1234567, 0, "1,234,567"},
		{-1234, 0, "-1,234"},
		{22.04, 1, "22.0"},
		{18.149, 1, "18.1"},
	}
	for _, tt := range tests {
		if got := FormatValue(tt.v, tt.dec); got != tt.want {
			t.Errorf("FormatValue(%v, %d) = %q, want %q", tt.v, tt.dec, got, tt.want)
		}
	}
}

// run builds a measured run of test "t" against proxy "p".
func run(conns int, v float64, clean bool) Run {
	r := Run{Test: "t", Proxy: "p", Conns: conns, Metrics: map[string]float64{"t": v}, Clean: clean, CoreBusy: []float64{90, 50}}
	if !clean {
		r.Problem = "3 read errors"
	}
	return r
}

func TestBestCleanLevel(t *testing.T) {
	tests := []struct {
		name      string
		runs      []Run
		less      bool
		wantConns int
		wantV     float64
		wantOK    bool
	}{
		{
			name:      "highest clean median wins",
			runs:      []Run{run(16, 100, true), run(16, 110, true), run(16, 105, true), run(64, 200, true), run(64, 190, true), run(64, 500, true)},
			wantConns: 64, wantV: 200, wantOK: true,
		},
		{
			name:      "a level with one unclean run is not clean",
			runs:      []Run{run(16, 100, true), run(64, 300, true), run(64, 310, false)},
			wantConns: 16, wantV: 100, wantOK: true,
		},
		{
			name:      "warmup runs never count",
			runs:      []Run{run(16, 100, true), func() Run { r := run(64, 900, true); r.Warmup = true; return r }()},
			wantConns: 16, wantV: 100, wantOK: true,
		},
		{
			name:      "less is better",
			runs:      []Run{run(16, 30, true), run(64, 20, true), run(256, 10, false)},
			less:      true,
			wantConns: 64, wantV: 20, wantOK: true,
		},
		{
			name:      "tie goes to lower concurrency",
			runs:      []Run{run(64, 100, true), run(16, 100, true)},
			wantConns: 16, wantV: 100, wantOK: true,
		},
		{
			name:   "no clean level",
			runs:   []Run{run(16, 100, false), run(64, 100, false)},
			wantOK: false,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Best(Levels(tt.runs, "t", "p"), "t", tt.less)
			if ok != tt.wantOK {
				t.Fatalf("Best ok = %v, want %v", ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if got.Conns != tt.wantConns || got.Values["t"] != tt.wantV {
				t.Errorf("Best = %d conns, %v; want %d conns, %v", got.Conns, got.Values["t"], tt.wantConns, tt.wantV)
			}
		})
	}
}

func TestLevelsGroupsAndFilters(t *testing.T) {
	runs := []Run{run(64, 1, true), run(16, 2, false), run(16, 4, true)}
	other := run(16, 99, true)
	other.Proxy = "q"
	runs = append(runs, other)
	got := Levels(runs, "t", "p")
	want := []Level{
		{Conns: 16, Runs: 2, Clean: false, Problem: "3 read errors", Values: map[string]float64{"t": 3}, CoreBusy: [2]float64{90, 50}},
		{Conns: 64, Runs: 1, Clean: true, Values: map[string]float64{"t": 1}, CoreBusy: [2]float64{90, 50}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Levels (-want +got):\n%s", diff)
	}
}
