package socks5

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// curl runs curl (required under CI) with args and a 10s limit and
// returns its output and exit error.
func curl(t *testing.T, args ...string) (string, error) {
	t.Helper()
	path := proxytest.RequireTool(t, "curl", "curl")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	args = append([]string{"-sS", "--max-time", "10", "--noproxy", ""}, args...)
	out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
	return string(out), err
}

func TestCurl(t *testing.T) {
	port := startOrigin(t, "tcp4")
	authed := startServer(t, "tcp4", authPolicy(t), Config{})
	open := startServer(t, "tcp4", openPolicy(t), Config{})
	creds := testUser + ":" + testPass
	tests := []struct {
		name string
		args []string
		path string
	}{
		{"socks5-hostname with user:pass", []string{"--socks5-hostname", authed.addr, "--proxy-user", creds}, "/h"},
		// curl resolves the name itself for --socks5 and --socks4, and
		// localhost may be ::1 first, where the origin does not listen.
		{"socks5 with user:pass", []string{"--socks5", authed.addr, "--proxy-user", creds, "--ipv4"}, "/s"},
		{"socks5h URL with user:pass", []string{"-x", "socks5h://" + creds + "@" + authed.addr}, "/u"},
		{"socks5-hostname without auth", []string{"--socks5-hostname", open.addr}, "/n"},
		{"socks4a", []string{"--socks4a", open.addr}, "/4a"},
		{"socks4", []string{"--socks4", open.addr, "--ipv4"}, "/4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			url := fmt.Sprintf("http://localhost:%d%s", port, tt.path)
			out, err := curl(t, append(tt.args, url)...)
			if err != nil {
				t.Fatalf("curl %s: %v\n%s", strings.Join(tt.args, " "), err, out)
			}
			if want := "origin says " + tt.path; out != want {
				t.Errorf("curl output %q, want %q", out, want)
			}
		})
	}

	refusals := []struct {
		name string
		args []string
	}{
		{"wrong password", []string{"--socks5-hostname", authed.addr, "--proxy-user", testUser + ":wrong"}},
		{"no credentials", []string{"--socks5-hostname", authed.addr}},
		{"socks4a to an auth listener", []string{"--socks4a", authed.addr}},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			out, err := curl(t, append(tt.args, fmt.Sprintf("http://localhost:%d/", port))...)
			if err == nil {
				t.Fatalf("curl %s succeeded: %q", strings.Join(tt.args, " "), out)
			}
			if strings.Contains(out, "origin says") {
				t.Errorf("curl got the origin's answer: %q", out)
			}
		})
	}
}
