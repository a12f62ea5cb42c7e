package proxytest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a redis-server (Debian's, installed by scripts/deps.sh) that a
// test started on a loopback port of its own, without persistence.
type Redis struct {
	// Addr is the server's host:port.
	Addr string

	t    testing.TB
	path string
	dir  string
	conf string   // a configuration file to start with ("" = none): a Sentinel's
	args []string // further options: a replica's, a Redis Cluster node's, a Sentinel's

	mu  sync.Mutex
	cmd *exec.Cmd // the running server; nil while killed
}

// StartRedis starts a redis-server on a free loopback port, stopped by
// t.Cleanup. It skips the test without redis-server (fails under CI: see
// RequireTool).
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	return startRedis(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "")
}

// StartRedisWith starts a redis-server as StartRedis does, with the
// further options args (as "--requirepass", "PASSWORD").
func StartRedisWith(t testing.TB, args ...string) *Redis {
	t.Helper()
	return startRedis(t, fmt.Sprintf("127.0.0.1:%d", freePort(t)), "", args...)
}

// freeBusPort returns a loopback address for a Redis Cluster node: its
// port and that port plus 10,000 (the node's cluster bus) were free a
// moment ago.
func freeBusPort(t testing.TB) string {
	t.Helper()
	for range 100 {
		port := freePort(t)
		if port+10000 > 65535 {
			continue
		}
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		if err == nil {
			ln.Close()
			return fmt.Sprintf("127.0.0.1:%d", port)
		}
	}
	t.Fatal("proxytest: no free loopback port with a free cluster bus port")
	return ""
}

// startRedis starts a redis-server on addr, with the configuration file
// conf ("" = none; a Sentinel's: it runs as a Sentinel) and options args,
// stopped by t.Cleanup.
func startRedis(t testing.TB, addr, conf string, args ...string) *Redis {
	t.Helper()
	path := RequireTool(t, "redis-server", "redis-server")
	r := &Redis{Addr: addr, t: t, path: path, dir: t.TempDir(), conf: conf, args: args}
	r.Start()
	t.Cleanup(r.Kill)
	return r
}

// URL returns the redis:// URL of the server.
func (r *Redis) URL() string { return "redis://" + r.Addr + "/0" }

// Start starts the server (again, after Kill) on its port and waits until
// it answers PING.
func (r *Redis) Start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.Addr)
	var args []string
	if r.conf != "" {
		args = append(args, r.conf, "--sentinel")
	} else {
		args = append(args, "--save", "", "--appendonly", "no")
	}
	args = append(args, "--port", port, "--bind", "127.0.0.1", "--dir", r.dir, "--loglevel", "warning")
	cmd := exec.Command(r.path, append(args, r.args...)...)
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("start redis-server: %v", err)
	}
	r.mu.Lock()
	r.cmd = cmd
	r.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for !r.ping() {
		if time.Now().After(deadline) {
			r.Kill()
			r.t.Fatalf("redis-server on %s did not answer PING within 10s", r.Addr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ping reports whether the server answers PING (or answers that it
// wants a password first).
func (r *Redis) ping() bool {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	line = strings.TrimSpace(line)
	return err == nil && (line == "+PONG" || strings.HasPrefix(line, "-NOAUTH"))
}

// Kill kills the server (SIGKILL: no goodbye to its clients) and waits
// for it to exit. It does nothing when the server is not running.
func (r *Redis) Kill() {
	r.mu.Lock()
	cmd := r.cmd
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	cmd.Wait()
}

// RedisDo sends one command to the Redis server (or sentinel) at addr and
// returns its reply, within 5 seconds.
func RedisDo(addr string, args ...any) (any, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DisableIdentity: true, PoolSize: 1,
		DialTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	v, err := c.Do(ctx, args...).Result()
	if err != nil {
		return nil, fmt.Errorf("redis %s %v: %w", addr, args[0], err)
	}
	return v, nil
}

// Do sends one command to the server and returns its reply; it fails
// the test on an error.
func (r *Redis) Do(args ...any) any {
	r.t.Helper()
	v, err := RedisDo(r.Addr, args...)
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}
