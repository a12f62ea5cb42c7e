//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rustle-proxy/rustle/bench/report"
)

// proc is a process the campaign started: a proxy, the origin or a load
// tool. It is started through taskset so that it and every process it forks
// stay on its CPUs (one, but for the "More cores" tests).
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd.Wait returned
	err  error         // cmd.Wait's result, set before done is closed
}

// procs tracks every running proc, so that an interrupted campaign stops
// them all. Guarded by procsMu.
var (
	procsMu sync.Mutex
	procs   = map[*proc]bool{}
)

// startProc starts argv pinned to cpus, in its own process group, with
// stdout and stderr appended to logPath (or to stdout, if not nil).
func startProc(name string, cpus []int, argv []string, env []string, logPath string, stdout io.Writer) (*proc, error) {
	args := append([]string{"-c", cpuList(cpus)}, argv...)
	cmd := exec.Command("taskset", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("campaign: open log %s: %w", logPath, err)
	}
	cmd.Stderr = logf
	cmd.Stdout = logf
	if stdout != nil {
		cmd.Stdout = stdout
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("campaign: start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	procsMu.Lock()
	procs[p] = true
	procsMu.Unlock()
	go p.wait(logf)
	return p, nil
}

// wait reaps the process; it runs in its own goroutine per proc and ends
// when the process does.
func (p *proc) wait(logf *os.File) {
	p.err = p.cmd.Wait()
	logf.Close()
	close(p.done)
}

// pid returns the process's PID: taskset executes the command in place, so
// it is the PID of the proxy itself.
func (p *proc) pid() int { return p.cmd.Process.Pid }

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop ends the process and everything it forked: SIGTERM to the process,
// up to grace for it to exit, then SIGKILL to each remaining descendant by
// PID and to the process group. It waits for the process to be reaped and
// is safe to call more than once.
func (p *proc) stop(grace time.Duration) {
	procsMu.Lock()
	delete(procs, p)
	procsMu.Unlock()
	if p.exited() {
		return
	}
	pids := descendants(p.pid())
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
	}
	// Children seen at the start or now (helpers started late).
	for _, pid := range append(pids, descendants(p.pid())...) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	syscall.Kill(-p.pid(), syscall.SIGKILL)
	p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	// Descendants that were reparented away from the process group, if any.
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// stopAll stops every tracked process; the campaign calls it on exit and
// on interrupt.
func stopAll() {
	procsMu.Lock()
	var all []*proc
	for p := range procs {
		all = append(all, p)
	}
	procsMu.Unlock()
	var wg sync.WaitGroup
	for _, p := range all {
		wg.Go(func() { p.stop(3 * time.Second) })
	}
	wg.Wait()
}

// descendants returns the PIDs of every process below root (not root
// itself), read from /proc.
func descendants(root int) []int {
	children := map[int][]int{}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		st, err := report.ParseProcStat(string(b))
		if err != nil {
			continue
		}
		children[st.PPID] = append(children[st.PPID], pid)
	}
	var out []int
	queue := []int{root}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		for _, c := range children[pid] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// treeUsage is the CPU time and memory of a process and its descendants.
type treeUsage struct {
	ticks uint64 // utime+stime, clock ticks
	rssKB int64  // VmRSS, summed
	procs int
}

// usage sums utime+stime and VmRSS over root and its descendants.
func usage(root int) (treeUsage, error) {
	var u treeUsage
	for i, pid := range append([]int{root}, descendants(root)...) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			if i == 0 {
				return u, fmt.Errorf("campaign: read stat of %d: %w", pid, err)
			}
			continue // a helper that just exited
		}
		st, err := report.ParseProcStat(string(b))
		if err != nil {
			return u, err
		}
		s, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		rss, err := report.ParseVmRSS(string(s))
		if err != nil {
			return u, err
		}
		u.ticks += st.UTime + st.STime
		u.rssKB += rss
		u.procs++
	}
	return u, nil
}

// pss sums the proportional set size (Pss of /proc/PID/smaps_rollup) over
// root and its descendants, in kB.
func pss(root int) (int64, error) {
	var total int64
	for i, pid := range append([]int{root}, descendants(root)...) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
		if err != nil {
			if i == 0 {
				return 0, fmt.Errorf("campaign: read smaps_rollup of %d: %w", pid, err)
			}
			continue
		}
		kb, err := report.ParsePss(string(b))
		if err != nil {
			return 0, err
		}
		total += kb
	}
	return total, nil
}

// cpuSample reads the per-CPU counters of /proc/stat.
func cpuSample() (map[int]report.CPUTimes, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return nil, fmt.Errorf("campaign: read /proc/stat: %w", err)
	}
	return report.ParseCPUStat(string(b))
}

// busy returns the busy % of the proxy's CPUs and of the load side's
// between two samples, each averaged over its CPUs (one each, but for the
// "More cores" tests).
func busy(s coreSplit, before, after map[int]report.CPUTimes) []float64 {
	avg := func(cpus []int) float64 {
		var sum float64
		for _, c := range cpus {
			sum += report.BusyPercent(before[c], after[c])
		}
		return sum / float64(max(len(cpus), 1))
	}
	return []float64{avg(s.proxy), avg(s.load)}
}

// runTool runs a load tool pinned to cpus to completion, bounded by ctx
// and timeout, and returns its stdout and stderr together and the CPU
// seconds (user+system) it used.
func runTool(ctx context.Context, cpus []int, timeout time.Duration, argv, env []string) (string, float64, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append([]string{"-c", cpuList(cpus)}, argv...)
	cmd := exec.CommandContext(ctx, "taskset", args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	var cpu float64
	if cmd.ProcessState != nil {
		cpu = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return string(out), cpu, fmt.Errorf("campaign: %s: %w", filepath.Base(argv[0]), err)
	}
	return string(out), cpu, nil
}

// errNotReady is returned when a proxy does not accept connections in time.
var errNotReady = errors.New("campaign: proxy not accepting connections")

// cpuNS sums the CPU time of root and its descendants in nanoseconds:
// the first field of /proc/PID/task/TID/schedstat of every thread (the
// time it ran, user and system). It is exact where utime+stime come in
// clock ticks (10 ms), which at a few thousand requests per second is
// several per cent of a run's CPU; a thread that exited between two
// readings is missed (proxyCPU then falls back on utime+stime). wait
// sums the second field: the time those threads were runnable but
// waited in a run queue for a CPU, which other work on the proxy's CPUs
// causes (or the proxy's own threads, more than its CPUs can run).
// threads holds both fields of every thread, by thread ID, for
// busiestThread.
func cpuNS(root int) (total, wait uint64, threads map[int]threadTimes, err error) {
	threads = map[int]threadTimes{}
	for _, pid := range append([]int{root}, descendants(root)...) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			continue // a helper that just exited
		}
		for _, task := range tasks {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, task.Name()))
			if err != nil {
				continue // a thread that just exited
			}
			run, w, err := report.ParseSchedstat(string(b))
			if err != nil {
				return 0, 0, nil, err
			}
			total += run
			wait += w
			if tid, err := strconv.Atoi(task.Name()); err == nil {
				threads[tid] = threadTimes{run: run, wait: w}
			}
		}
	}
	if len(threads) == 0 {
		return 0, 0, nil, fmt.Errorf("campaign: no schedstat of %d or its threads readable (a kernel without CONFIG_SCHED_INFO?)", root)
	}
	return total, wait, threads, nil
}

// threadTimes is one thread's schedstat: the nanoseconds it ran and
// those it waited in a run queue for a CPU.
type threadTimes struct{ run, wait uint64 }

// busiestThread returns the thread that ran the most between two readings
// of cpuNS (a thread born between them counts from zero): how long it
// ran and how long it waited for a CPU, in nanoseconds. Its wait is the
// sign of other work on the proxy core that report.Disturbed judges: a
// proxy with more threads than CPUs also waits on itself, but mostly in
// its other threads, which wait while the busiest one runs.
func busiestThread(before, after map[int]threadTimes) (run, wait uint64) {
	for tid, a := range after {
		b := before[tid]
		if r := delta(b.run, a.run); r > run {
			run, wait = r, delta(b.wait, a.wait)
		}
	}
	return run, wait
}
