package server

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestQUICSocketLogged checks that an HTTP/3 listener's UDP socket is
// what quic-go needs and that rustle says so in its log: buffers raised
// from the kernel's default to quic-go's 7 MiB or as far as
// net.core.rmem_max and wmem_max let them (getsockopt reports twice what
// was set), a warning naming the sysctls when that is short of 7 MiB, and
// segmentation offload (GSO) on, as Linux 4.18 and later have it.
func TestQUICSocketLogged(t *testing.T) {
	setup := quicListener(t)
	_, _, logs := startConfigured(t, setup)
	line := ""
	for l := range strings.Lines(logs.String()) {
		if strings.Contains(l, "http3: UDP socket") || strings.Contains(l, "http3: the UDP socket's buffers") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no line about the UDP socket in the log:\n%s", logs.String())
	}
	t.Log(strings.TrimSpace(line))
	field := func(name string) string {
		m := regexp.MustCompile(` ` + name + `=(\S+)`).FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("no %s in %q", name, line)
		}
		return m[1]
	}
	num := func(name string) int {
		n, err := strconv.Atoi(field(name))
		if err != nil {
			t.Fatalf("%s in %q: %v", name, line, err)
		}
		return n
	}
	short := false
	for _, b := range []struct{ field, sysctl string }{{"recv_buffer", "rmem_max"}, {"send_buffer", "wmem_max"}} {
		data, err := os.ReadFile("/proc/sys/net/core/" + b.sysctl)
		if err != nil {
			t.Skipf("%s: %v", b.sysctl, err)
		}
		limit, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil {
			t.Fatalf("%s %q: %v", b.sysctl, data, err)
		}
		want := min(quicWantBuffer, 2*limit)
		got := num(b.field)
		if got < want {
			t.Errorf("%s %d, want at least %d (quic-go's %d, or twice net.core.%s = %d): %q", b.field, got, want, quicWantBuffer, b.sysctl, limit, line)
		}
		short = short || got < quicWantBuffer // with CAP_NET_ADMIN quic-go forces 7 MiB past the sysctl
	}
	if warned := strings.Contains(line, "level=WARN"); warned != short {
		t.Errorf("a buffer short of %d: %v; warned: %v: %q", quicWantBuffer, short, warned, line)
	}
	if os.Getenv("QUIC_GO_DISABLE_GSO") == "" && field("gso") != "true" {
		t.Errorf("GSO off: %q", line)
	}
}
