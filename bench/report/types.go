package report

import "time"

// Reference is the proxy every peer is compared with in the ratio columns.
const Reference = "rustle"

// LoadBoundBusy is the busy % of the load core (the load tool and the
// origin) above which a run's latency is the load side's, not the
// proxy's. Chosen from the WebSocket-over-TLS rows at 20,000 msg/s on the
// 2-core machine (issue 32): with the load core at 95 % or less rustle's
// median was 0.17 to 0.35 ms, at 98 to 99 % it was 1.4 to 2.9 ms, and
// gost's was 0.32 ms in one run and 1.62 ms in
// another with the load core at 95 %: the load core's queue starts
// to set the latency between 90 and 95 %, so 90 leaves a margin below
// the first run it decided. Every other fixed-rate run measured there had
// its load core at 80 % or less.
const LoadBoundBusy = 90.0

// DisturbedWait is the share of its run time, in percent, that the
// proxy's busiest thread (the one that ran the most in a fixed-rate run's
// window) may wait in a run queue for a CPU before the run counts as
// disturbed by other work on the proxy core (Run.Disturbed), and
// DisturbedFloor the share of the window, in percent, that wait must also
// pass. Chosen from quick runs of rate-1k and rate-wss-64 on the 2-core
// machine (bench/README.md, "Latency tails at a fixed rate"): on a quiet
// core the busiest thread of rustle waited 3 to 13 % of its run time,
// gost's 11 to 17 % (gost's other threads wait far more, on their own
// sibling), Squid's (its only one) 9 to 12 %; with a busy loop pinned
// to the proxy core rustle's and Squid's waited 89 to 99 %, gost's 241
// to 345 %. The floor keeps a
// thread that ran a few milliseconds from counting.
const (
	DisturbedWait  = 25.0
	DisturbedFloor = 1.0
)

// SlowedFactor is how many times the campaign's fastest memory loop
// (Run.MemoryLoopMS) a run's may take before the run is Slowed. On the
// benchmark VMs the loop takes 87 to 97 ms while the machine runs at its
// usual pace and 115 to 178 ms in the spells in which the same proxy work
// took up to 1.8 times the CPU (bench/README.md, "A slow machine").
const SlowedFactor = 1.15

// Slowed reports whether a run whose memory loop took loopMS was made in
// a spell of slow memory, the fastest loop of the campaign until then
// having taken fastestMS; false where either was not measured.
func Slowed(loopMS, fastestMS float64) bool {
	return loopMS > 0 && fastestMS > 0 && loopMS > SlowedFactor*fastestMS
}

// Disturbed reports whether a fixed-rate run of windowS seconds was
// disturbed by other work on the proxy core, given how long the proxy's
// busiest thread ran (runMS) and waited for a CPU (waitMS) in it: the
// wait was more than DisturbedWait % of the run and more than
// DisturbedFloor % of the window.
func Disturbed(runMS, waitMS, windowS float64) bool {
	return waitMS > DisturbedWait/100*runMS && waitMS > DisturbedFloor/100*windowS*1000
}

// NoProxy is the name of the column where the client talks straight to the
// origin: the ceiling any proxy can reach on the machine.
const NoProxy = "none"

// Proxy describes one column of the report.
type Proxy struct {
	// Name is the identifier used in runs and flags ("rustle", "squid").
	Name string `json:"name"`
	// Label is the column heading ("rustle", "Squid", "no proxy").
	Label string `json:"label"`
	// Version is what the proxy reports about itself; empty if unknown.
	Version string `json:"version,omitempty"`
	// Tuning lists the settings the campaign gave the proxy, one per line.
	Tuning []string `json:"tuning,omitempty"`
	// Skipped, when not empty, says why the proxy was not run at all. Its
	// cells read "not run", never zero.
	Skipped string `json:"skipped,omitempty"`
	// Lacks lists rows whose mode the proxy lacks on this machine (a
	// Squid built without TLS): their cells read "—", like the rows of
	// Row.Unsupported, and LacksWhy says why.
	Lacks    []string `json:"lacks,omitempty"`
	LacksWhy string   `json:"lacks_why,omitempty"`
}

// Row is one line of a results table: one figure measured per proxy.
type Row struct {
	// ID names the figure in Run.Metrics ("http-1k", "cpu-1k", "mem-1000").
	ID string `json:"id"`
	// Test is the test whose runs carry the figure ("http-1k" for "cpu-1k").
	Test string `json:"test"`
	// Section is the table the row belongs to ("Plain HTTP proxy port").
	Section string `json:"section"`
	// Title is the row's description ("HTTP, 1 KB responses").
	Title string `json:"title"`
	// Unit is the unit of the figure ("req/s", "Gbit/s", "µs/req", "MB").
	Unit string `json:"unit"`
	// LessIsBetter is true for costs (CPU, memory, latency); false for
	// throughput.
	LessIsBetter bool `json:"less_is_better,omitempty"`
	// Decimals is the number of decimals shown; 0 prints an integer with
	// thousands separators.
	Decimals int `json:"decimals,omitempty"`
	// Unsupported lists the proxies that lack the mode; their cells read
	// "—".
	Unsupported []string `json:"unsupported,omitempty"`
	// Selects is true when the concurrency level of the test is chosen on
	// this row's figure. Exactly one row per test selects; the other rows
	// of the test take their values from the runs at that level.
	Selects bool `json:"selects,omitempty"`
	// Chart says in which chart the row appears: "" (none), "throughput"
	// or "memory".
	Chart string `json:"chart,omitempty"`
	// Tunnels is the number of open tunnels of a memory row, its x value in
	// the memory chart.
	Tunnels int `json:"tunnels,omitempty"`
	// Cores is the number of proxy cores of a row of the "More cores"
	// table; 0 for every other row. A section whose rows all have Cores
	// set is printed as that table: one line per core count, a ratio
	// column per proxy against its own 1-core figure.
	Cores int `json:"cores,omitempty"`
	// Against is the ID of another row of the same unit, in this section
	// or another, that this row is compared with: the table then gets a
	// column with the reference proxy's figure on this row divided by its
	// figure on that one (the cached [dns] resolver against the system
	// resolver, say, or the HTTPS port's CPU per request against the
	// plain port's). "" for no such comparison.
	Against string `json:"against,omitempty"`
	// Level, when not 0, is the level the row's figure is read at
	// instead of its test's best clean level: the offered rate of a row
	// "at a fixed offered rate", whose test measures each rate on its own
	// (its runs' Conns is the rate, in exchanges per second). A row with
	// a Level ignores its test's selecting row, and reads "no clean run"
	// when the runs at its level were not clean.
	Level int `json:"level,omitempty"`
	// LoadSensitive is true for a row whose figure the load side decides
	// when its core is saturated: a latency row at a fixed offered rate.
	// Its cell is marked load-bound (Cell.LoadBound) when a run at its
	// level had the load core more than LoadBoundBusy % busy, and is then
	// left out of every comparison, and likewise marked disturbed
	// (Cell.Disturbed) when a run at its level was Run.Disturbed. A CPU
	// row is not: the proxy's own CPU time per exchange does not wait in
	// the load core's queue, nor in the proxy core's run queue.
	LoadSensitive bool `json:"load_sensitive,omitempty"`
	// Note is a footnote printed under the table, if any.
	Note string `json:"note,omitempty"`
}

// unsupported reports whether proxy lacks the row's mode.
func (r Row) unsupported(proxy string) bool {
	for _, p := range r.Unsupported {
		if p == proxy {
			return true
		}
	}
	return false
}

// Run is one measured run of one test against one proxy at one concurrency
// level.
type Run struct {
	Test  string `json:"test"`
	Proxy string `json:"proxy"`
	// Conns is the run's concurrency level (connections or tunnels), or
	// for a test at a fixed offered rate the rate (exchanges per second).
	Conns  int `json:"conns"`
	Repeat int `json:"repeat"`
	// Warmup runs are recorded but never enter a figure.
	Warmup    bool      `json:"warmup,omitempty"`
	Start     time.Time `json:"start"`
	DurationS float64   `json:"duration_s"`
	// Metrics maps row IDs to the run's figure in the row's unit.
	Metrics map[string]float64 `json:"metrics"`
	// Clean is false when the run saw any error, non-2xx response, short
	// response or failed tunnel. A level with an unclean run is not clean.
	Clean bool `json:"clean"`
	// Problem says why the run is not clean.
	Problem  string `json:"problem,omitempty"`
	Requests int64  `json:"requests,omitempty"`
	// ToleratedReadErrors counts wrk read errors not held against the
	// proxy: those of a proxy that closes the client connection after
	// every response without a "Connection: close" header, at most one per
	// request.
	ToleratedReadErrors int64 `json:"tolerated_read_errors,omitempty"`
	Bytes               int64 `json:"bytes,omitempty"`
	// TLSHandshakes counts the TLS handshakes the load tool made in the
	// run, TLSResumed those that resumed a session.
	TLSHandshakes int64 `json:"tls_handshakes,omitempty"`
	TLSResumed    int64 `json:"tls_resumed,omitempty"`
	// TLSCurves counts the run's TLS handshakes by the key exchange they
	// used, as Go names it ("X25519MLKEM768"); TLSCert is the key of the
	// certificate the proxy presented ("ECDSA P-256").
	TLSCurves map[string]int64 `json:"tls_curves,omitempty"`
	TLSCert   string           `json:"tls_cert,omitempty"`
	// DNSQueries counts the queries the origin's DNS responder answered
	// during the run, in the tests that resolve with it; nil in the
	// others.
	DNSQueries *int64 `json:"dns_queries,omitempty"`
	// ProxyCPUSeconds is utime+stime of all the proxy's processes over the
	// run; or, where ProxyCPUFrom says "schedstat", the time their threads
	// ran in nanoseconds (/proc/PID/task/TID/schedstat), exact where
	// utime+stime come in clock ticks.
	ProxyCPUSeconds float64 `json:"proxy_cpu_s,omitempty"`
	// ProxyCPUFrom says where ProxyCPUSeconds comes from: "schedstat", or
	// empty for utime+stime.
	ProxyCPUFrom string `json:"proxy_cpu_from,omitempty"`
	// ProxyRSSKB is VmRSS summed over the proxy's processes at the end of
	// the run.
	ProxyRSSKB int64 `json:"proxy_rss_kb,omitempty"`
	// ProxyWaitMS is, in a fixed-rate run, the time the proxy's threads
	// spent runnable but waiting in a run queue for a CPU over the
	// window, in milliseconds (the second field of their schedstat): the
	// delay other work on the proxy core added to the proxy's, whatever
	// CoreBusy and OtherBusy say (see bench/README.md, "The fixed-rate
	// rows"). Zero where schedstat was not read.
	ProxyWaitMS float64 `json:"proxy_wait_ms,omitempty"`
	// ThreadRunMS and ThreadWaitMS are, in a fixed-rate run, how long the
	// proxy's busiest thread (the one that ran the most in the window)
	// ran and waited in a run queue for a CPU, in milliseconds: what
	// Disturbed judges.
	ThreadRunMS  float64 `json:"thread_run_ms,omitempty"`
	ThreadWaitMS float64 `json:"thread_wait_ms,omitempty"`
	// Disturbed is true for a fixed-rate run disturbed by other work on
	// the proxy core (the function Disturbed), after the campaign's
	// retries: its latency figures are marked and compared with nothing;
	// its CPU per exchange stands.
	Disturbed bool `json:"disturbed,omitempty"`
	// MemoryLoopMS is, in a fixed-rate run, the CPU time "load memloop"
	// (10 million random reads over 64 MiB) took on the proxy's core just
	// before the run, in milliseconds (other work on the core does not
	// lengthen it, slower memory does); zero where it was not run.
	MemoryLoopMS float64 `json:"memory_loop_ms,omitempty"`
	// Slowed is true for a fixed-rate run whose MemoryLoopMS was more
	// than SlowedFactor times the fastest of the campaign until then
	// (the function Slowed), after the campaign's retries: the machine's
	// memory was slow, and the proxy's CPU per exchange with it.
	Slowed bool `json:"slowed,omitempty"`
	// CoreBusy is the busy percentage of the proxy core and of the load
	// core over the run, in that order.
	CoreBusy []float64 `json:"core_busy_pct,omitempty"`
	// OtherBusy is the share of both cores' time used by processes that
	// are not part of the benchmark (other work on a shared machine), in
	// percent; noise that a reader should see.
	OtherBusy float64 `json:"other_busy_pct"`
	// Raw is the measuring tool's output, for the record.
	Raw string `json:"raw,omitempty"`
}

// Campaign is everything a report is made from; it is also the JSON written
// beside the report.
type Campaign struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Seed     int64     `json:"seed"`
	Quick    bool      `json:"quick"`
	Repeats  int       `json:"repeats"`
	// DurationS is the length of one measured run in seconds.
	DurationS float64 `json:"duration_s"`
	// Machine describes the host in one line (CPU model, cores, kernel).
	Machine string `json:"machine"`
	// ProxyCore and LoadCore are the CPU numbers the proxy and the load
	// generator with the origin were pinned to.
	ProxyCore int `json:"proxy_core"`
	LoadCore  int `json:"load_core"`
	// CoreSplits says where the processes of each "More cores" test ran;
	// empty when there was none.
	CoreSplits []CoreSplit `json:"core_splits,omitempty"`
	// Tools lists the load tools and their versions, one per line.
	Tools []string `json:"tools,omitempty"`
	// Order is the order in which the test/proxy pairs ran: "test/proxy#N"
	// for repeat N of a test against a proxy, "test/proxy" for every
	// repeat at once (the Go benchmarks; every test in campaigns before
	// repeats ran in turns).
	Order   []string `json:"order,omitempty"`
	Proxies []Proxy  `json:"proxies"`
	Rows    []Row    `json:"rows"`
	Runs    []Run    `json:"runs"`
	// Notes are extra lines for the "What these numbers do not show"
	// section, after the standard caveats.
	Notes []string `json:"notes,omitempty"`
	// Parts are the stretches of time the campaign ran in: one for a
	// campaign run to its end at once, one more for every -resume. Empty
	// in campaigns from before it was recorded.
	Parts []Part `json:"parts,omitempty"`
	// Resume is what -resume needs to go on with the campaign where it
	// stopped; nil in campaigns from before it was recorded.
	Resume *Resume `json:"resume,omitempty"`
}

// Part is one stretch of time a campaign ran in.
type Part struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
}

// Resume is the state a campaign keeps so that -resume can continue it:
// the selection it was started with, how far along the shuffled order it
// got, and its own notes apart from the ones derived from its runs.
type Resume struct {
	// Tests is the -tests list the campaign was started with.
	Tests string `json:"tests"`
	// PairsDone is how many test/proxy pairs of Order ran to their end;
	// runs of the pair after them are from an interrupted test and are
	// made again.
	PairsDone int `json:"pairs_done"`
	// Notes are the campaign's notes without those derived from its runs
	// when it was saved (which are derived again).
	Notes []string `json:"notes,omitempty"`
	// SilentClosers are the labels of the proxies seen closing client
	// connections without "Connection: close" (a note each).
	SilentClosers []string `json:"silent_closers,omitempty"`
	// Skipped holds why a proxy (by name) or one of its ports
	// (name/listener, name/listener/test) is no longer run.
	Skipped map[string]string `json:"skipped,omitempty"`
}

// CoreSplit is where the processes of one test of the "More cores" table
// ran.
type CoreSplit struct {
	// Test is the test's ID ("cores-2").
	Test string `json:"test"`
	// ProxyCPUs are the CPUs the proxy was pinned to, LoadCPUs those of
	// the load generator and the origin.
	ProxyCPUs []int `json:"proxy_cpus"`
	LoadCPUs  []int `json:"load_cpus"`
	// Shared is true when the load side shared the proxy's CPUs (a
	// machine too small for both to have their own).
	Shared bool `json:"shared,omitempty"`
}
