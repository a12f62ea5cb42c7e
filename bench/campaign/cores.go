//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// coreSplit places the processes of one test: the proxy on proxy, the load
// generator and the origin on load. Every test but those of the "More
// cores" table runs on the base split: the first CPU for the proxy, the
// second for the load side.
type coreSplit struct {
	proxy, load []int
	// shared is true when the load side shares the proxy's CPUs: a machine
	// with too few CPUs for n proxy cores and n load cores of their own.
	shared bool
	// logical is true when the split counts logical CPUs because the
	// machine has fewer than two physical cores (or no topology to read):
	// the proxy's CPUs may then share a physical core with the load's.
	logical bool
}

// n returns the number of proxy cores of the split.
func (s coreSplit) n() int { return len(s.proxy) }

// all returns every CPU of the split once, in ascending order.
func (s coreSplit) all() []int {
	out := slices.Concat(s.proxy, s.load)
	slices.Sort(out)
	return slices.Compact(out)
}

// cpuList formats CPU numbers as taskset -c takes them: "0", "0,1,2".
func cpuList(cpus []int) string {
	parts := make([]string, len(cpus))
	for i, c := range cpus {
		parts[i] = strconv.Itoa(c)
	}
	return strings.Join(parts, ",")
}

// cpuTopo is one CPU this process may run on and the physical core it
// belongs to ("package:core"; the CPU's own number when unknown).
type cpuTopo struct {
	cpu  int
	core string
}

// allowedCPUs returns the CPUs in this process's affinity mask, in
// ascending order, with their physical cores read from sysfs.
func allowedCPUs() ([]cpuTopo, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("campaign: read CPU affinity: %w", err)
	}
	var out []cpuTopo
	for i := 0; i < 1024; i++ {
		if set.IsSet(i) {
			out = append(out, cpuTopo{cpu: i, core: physicalCore(i)})
		}
	}
	if len(out) < 2 {
		return nil, errors.New("campaign: needs at least 2 CPUs (one for the proxy, one for load and origin)")
	}
	return out, nil
}

// physicalCore names the physical core of cpu from
// /sys/devices/system/cpu/cpuN/topology: "package:core_id", or "cpuN" when
// the topology cannot be read (each CPU then counts as a core of its own).
func physicalCore(cpu int) string {
	dir := fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/", cpu)
	pkg, err1 := os.ReadFile(dir + "physical_package_id")
	core, err2 := os.ReadFile(dir + "core_id")
	if err1 != nil || err2 != nil {
		return "cpu" + strconv.Itoa(cpu)
	}
	return strings.TrimSpace(string(pkg)) + ":" + strings.TrimSpace(string(core))
}

// coreCounts are the proxy core counts of the "More cores" table: the
// seed's 1 to 8, and 16, 32 and 64 for a machine that holds them (n proxy
// cores need 2n physical cores), so that the same command measures a big
// machine unchanged.
var coreCounts = []int{1, 2, 4, 8, 16, 32, 64}

// splitCores places n proxy cores on cpus: the first CPU of each of the
// first n physical cores for the proxy (one hardware thread per core, as
// the seed's "n physical cores"), and every CPU of the other physical
// cores for the load generator and the origin, which must be at least n
// CPUs. The siblings of the proxy's CPUs are left idle. It returns false
// when the machine has too few cores for that.
func splitCores(cpus []cpuTopo, n int) (coreSplit, bool) {
	var order []string
	byCore := map[string][]int{}
	for _, c := range cpus {
		if _, ok := byCore[c.core]; !ok {
			order = append(order, c.core)
		}
		byCore[c.core] = append(byCore[c.core], c.cpu)
	}
	if n < 1 || len(order) < n {
		return coreSplit{}, false
	}
	var s coreSplit
	for _, core := range order[:n] {
		s.proxy = append(s.proxy, byCore[core][0])
	}
	for _, core := range order[n:] {
		s.load = append(s.load, byCore[core]...)
	}
	slices.Sort(s.load)
	if len(s.load) < n {
		return coreSplit{}, false
	}
	return s, true
}

// planCores returns the splits of the "More cores" table on cpus: every
// count of coreCounts that splitCores can place. A machine with fewer than
// two physical cores is counted in logical CPUs (logical set). Where only
// one proxy core fits (two or three cores), a second split runs the proxy
// on two cores with the load sharing them (shared set): 1 against 2 with
// the load sharing is all such a machine can say.
func planCores(cpus []cpuTopo) []coreSplit {
	fit := func(cpus []cpuTopo) []coreSplit {
		var out []coreSplit
		for _, n := range coreCounts {
			if s, ok := splitCores(cpus, n); ok {
				out = append(out, s)
			}
		}
		return out
	}
	plan := fit(cpus)
	logical := false
	if len(plan) == 0 {
		flat := make([]cpuTopo, len(cpus))
		for i, c := range cpus {
			flat[i] = cpuTopo{cpu: c.cpu, core: "cpu" + strconv.Itoa(c.cpu)}
		}
		cpus, logical = flat, true
		plan = fit(cpus)
	}
	if len(plan) == 1 {
		// The proxy on its CPU and the first of the load's (another
		// physical core), the load on every CPU.
		two := coreSplit{proxy: []int{plan[0].proxy[0], plan[0].load[0]}, shared: true}
		for _, c := range cpus {
			two.load = append(two.load, c.cpu)
		}
		plan = append(plan, two)
	}
	for i := range plan {
		plan[i].logical = logical
	}
	return plan
}

// coresWanted returns the proxy core counts of the "More cores" tests in
// selected.
func coresWanted(selected []testDef) []int {
	var out []int
	for _, t := range selected {
		if t.proxyCores > 0 {
			out = append(out, t.proxyCores)
		}
	}
	return out
}

// fitTests returns the tests of selected that run on a machine with the
// given plan: all but the "More cores" tests whose count is not in it.
func fitTests(selected []testDef, plan []coreSplit) []testDef {
	var out []testDef
	for _, t := range selected {
		if t.proxyCores == 0 || slices.ContainsFunc(plan, func(s coreSplit) bool { return s.n() == t.proxyCores }) {
			out = append(out, t)
		}
	}
	return out
}

// coresNotes says, for the report, how the "More cores" table was placed
// on this machine: the counts that did not fit, and a plain warning for a
// shared or logical split.
func coresNotes(plan []coreSplit, selected []int, ncpu int) []string {
	var out, missing []string
	fits := map[int]coreSplit{}
	for _, s := range plan {
		fits[s.n()] = s
	}
	for _, n := range selected {
		s, ok := fits[n]
		switch {
		case !ok:
			missing = append(missing, strconv.Itoa(n))
		case s.shared:
			out = append(out, fmt.Sprintf("More cores: this machine has %d CPUs, room for 1 proxy core with a load core of its own and no more. The %d-core row therefore runs the proxy on CPUs %s with wrk (%d threads) and the origin sharing those same CPUs: the load takes CPU time from the proxy, so its figure and its ratio against 1 core understate how the proxy scales. This is 1 against 2 with the load sharing, not the seed's table; a machine with 16 or more CPUs runs 1, 2, 4 and 8 proxy cores with load cores of their own (32 CPUs 16 too, 128 up to 64).",
				ncpu, s.n(), cpuList(s.proxy), s.n()))
		}
		if ok && s.logical {
			out = append(out, fmt.Sprintf("More cores, %d proxy cores: the machine has fewer than two physical cores to tell apart, so the split counts logical CPUs; the proxy's and the load's CPUs may be hardware threads of one core.", n))
		}
	}
	if len(missing) > 0 {
		out = append(out, fmt.Sprintf("More cores: no row for %s proxy cores: n proxy cores need n physical cores for the proxy and n more CPUs for wrk and the origin, and this machine's affinity mask has %d CPUs.",
			strings.Join(missing, ", "), ncpu))
	}
	return out
}

// coresTuning is the tuning line of each proxy for the "More cores" table.
var coresTuning = map[string]string{
	"rustle":    "More cores: workers = n (n accept sockets with SO_REUSEPORT, n tunnel engines), the process pinned to the n proxy CPUs (Go's GOMAXPROCS follows the mask: n)",
	"squid":     "More cores: workers n (SMP: n kids sharing the listening socket, a coordinator, the master and the auth helpers, all pinned to the n proxy CPUs)",
	"tinyproxy": "More cores: no workers setting (one thread per connection): the process pinned to the n proxy CPUs, over which its threads spread",
}
