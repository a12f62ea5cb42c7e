package proxytest

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// netnsSeq numbers the namespaces a test process makes.
var netnsSeq atomic.Int64

// RequireNetns checks that the test can make network namespaces (it runs
// as root and iproute2's ip is installed, and a namespace can be added):
// it returns the path of ip, or skips the test with the reason, or under
// CI (CI=true) fails it.
func RequireNetns(t testing.TB) string {
	t.Helper()
	ip := RequireTool(t, "ip", "iproute2")
	why := ""
	if os.Geteuid() != 0 {
		why = "network namespaces need root"
	} else {
		name := fmt.Sprintf("rustle-probe-%d", os.Getpid())
		if out, err := exec.Command(ip, "netns", "add", name).CombinedOutput(); err != nil {
			why = fmt.Sprintf("ip netns add: %v: %s", err, bytes.TrimSpace(out))
		} else {
			exec.Command(ip, "netns", "del", name).Run()
		}
	}
	if why == "" {
		return ip
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("cannot make network namespaces under CI: %s", why)
	}
	t.Skipf("cannot make network namespaces: %s", why)
	return ""
}

// NewNetns adds a network namespace with its loopback up, named after
// prefix and the process, and deletes it at t.Cleanup. It returns its
// name.
func NewNetns(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), netnsSeq.Add(1))
	IP(t, "netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	IP(t, "-n", name, "link", "set", "lo", "up")
	return name
}

// IP runs ip with args, failing the test on an error.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

// ListenIn listens on addr in the network namespace ns, from a thread
// that enters it and is then discarded; the listener stays in ns and is
// closed at t.Cleanup. The rest of the process stays where it was.
func ListenIn(t testing.TB, ns, network, addr string) net.Listener {
	t.Helper()
	ln, err := inNetns(ns, func() (net.Listener, error) { return net.Listen(network, addr) })
	if err != nil {
		t.Fatalf("proxytest: listen %s in namespace %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// DialIn connects to addr from the network namespace ns, from a thread
// that enters it and is then discarded: the socket stays in ns. The
// rest of the process stays where it was.
func DialIn(ctx context.Context, ns, network, addr string) (net.Conn, error) {
	return inNetns(ns, func() (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	})
}

// inNetns runs f on a thread that enters the network namespace ns and is
// then discarded, so that the sockets f makes belong to ns.
func inNetns[T any](ns string, f func() (T, error)) (T, error) {
	var zero T
	nsf, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return zero, fmt.Errorf("proxytest: open namespace %s: %w", ns, err)
	}
	defer nsf.Close()
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, now in ns, ends with the goroutine.
		runtime.LockOSThread()
		if err := unix.Setns(int(nsf.Fd()), unix.CLONE_NEWNET); err != nil {
			ch <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		v, err := f()
		ch <- result{v, err}
	}()
	r := <-ch
	return r.v, r.err
}

// NetnsHosts gives the network namespace ns an /etc/hosts of its own
// with lines, which the programs that `ip netns exec` runs there read
// (it bind-mounts /etc/netns/NS/hosts over /etc/hosts); it is removed at
// t.Cleanup.
func NetnsHosts(t testing.TB, ns string, lines ...string) {
	t.Helper()
	dir := "/etc/netns/" + ns
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	body := "127.0.0.1 localhost\n::1 localhost\n" + strings.Join(lines, "\n") + "\n"
	if err := os.WriteFile(dir+"/hosts", []byte(body), 0o644); err != nil {
		t.Fatalf("proxytest: %v", err)
	}
}

// RunIn runs the program name with args in the network namespace ns
// (ip netns exec), within ctx, and returns its standard output and
// standard error together.
func RunIn(ctx context.Context, ns, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns, name}, args...)...).CombinedOutput()
}

// benchInNetns remembers the benchmarks RunBenchInNetns ran, each once
// per process.
var benchInNetns sync.Map

// RunBenchInNetns runs the benchmark b again in the network namespace
// ns (ip netns exec, the test binary with -test.bench naming b and the
// process's -test.benchtime, -test.count and -test.benchmem), with value
// for NetnsChild, once per process, and copies its benchmark lines to
// standard output, where they read as this process's; then it skips b,
// which has no numbers of its own. A failed run fails b.
func RunBenchInNetns(b *testing.B, ns, value string) {
	b.Helper()
	name, _, _ := strings.Cut(b.Name(), "/")
	if _, done := benchInNetns.LoadOrStore(name, true); done {
		b.SkipNow()
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	args := []string{"netns", "exec", ns, exe, "-test.run", "^$", "-test.bench", "^" + name + "$", "-test.timeout=10m"}
	for _, f := range []string{"test.benchtime", "test.count", "test.benchmem", "test.cpu"} {
		if fl := flag.Lookup(f); fl != nil && fl.Value.String() != "" {
			args = append(args, "-"+f+"="+fl.Value.String())
		}
	}
	cmd := exec.Command("ip", args...)
	cmd.Env = append(os.Environ(), netnsChildEnv+"="+value)
	out, err := cmd.CombinedOutput()
	for line := range strings.Lines(string(out)) {
		if strings.HasPrefix(line, name) {
			os.Stdout.WriteString(line)
		}
	}
	if err != nil {
		b.Fatalf("the benchmark inside namespace %s failed: %v\n%s", ns, err, out)
	}
	b.Skipf("ran in namespace %s: its lines are above", ns)
}

// netnsChildEnv names the environment variable that tells a test run
// again inside a namespace (RunInNetns) that it is the child.
const netnsChildEnv = "RUSTLE_NETNS_CHILD"

// NetnsChild returns the value RunInNetns passed the test run inside a
// namespace, and whether this is that run.
func NetnsChild() (string, bool) {
	return os.LookupEnv(netnsChildEnv)
}

// RunInNetns runs the test t again, alone, in the network namespace ns
// (ip netns exec, the test binary with -test.run naming t), with value
// for NetnsChild, and fails t if it fails; its output is logged.
func RunInNetns(t *testing.T, ns, value string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	name, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run", "^"+name+"$", "-test.v", "-test.count=1",
		"-test.timeout=5m")
	cmd.Env = append(os.Environ(), netnsChildEnv+"="+value)
	out, err := cmd.CombinedOutput()
	t.Logf("in namespace %s:\n%s", ns, out)
	if err != nil {
		t.Fatalf("the test inside namespace %s failed: %v", ns, err)
	}
	if !bytes.Contains(out, []byte("--- PASS: "+name)) {
		t.Fatalf("the test inside namespace %s did not pass (skipped?)", ns)
	}
}
