package proxytest

import (
	"bytes"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// OPA is an Open Policy Agent server (opa run --server, installed by
// scripts/deps.sh) a test runs on a loopback port with a policy of its
// own: the decision service of [authz] as operators run it.
type OPA struct {
	// URL is the server's base, http://127.0.0.1:PORT; its data API is
	// URL + "/v1/data/<package path>".
	URL string
}

// StartOPA writes policy (Rego v1) to a file under t.TempDir(), starts
// OPA's server with it and waits until it answers /health. It skips the
// test where opa is missing, and fails it under CI (see [RequireTool]).
// t.Cleanup stops the server.
func StartOPA(t testing.TB, policy string) *OPA {
	t.Helper()
	bin := RequireTool(t, "opa", "github.com/open-policy-agent/opa (go install)")
	dir := t.TempDir()
	file := filepath.Join(dir, "policy.rego")
	writeFile(t, file, []byte(policy), 0o600)
	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	var out bytes.Buffer
	cmd := exec.Command(bin, "run", "--server", "--addr", addr, "--log-level", "error",
		"--skip-version-check", file)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("proxytest: start opa: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	o := &OPA{URL: "http://" + addr}
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get(o.URL + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return o
			}
		}
		select {
		case <-done:
			t.Fatalf("proxytest: opa exited: %v\n%s", cmd.ProcessState, out.String())
		case <-time.After(20 * time.Millisecond): // polling a port that is not open yet
		}
		if time.Now().After(deadline) {
			t.Fatalf("proxytest: opa did not answer on %s within 30s\n%s", addr, out.String())
		}
	}
}
