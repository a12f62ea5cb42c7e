package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/intercept"
)

// TestCACommand checks `rustle ca DIR`: it writes a CA that [intercept]
// loads, says where, and overwrites nothing on a second run.
func TestCACommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	var out, errb bytes.Buffer
	if code := run([]string{"ca", "-name", "test interception CA", dir}, nil, &out, &errb); code != 0 {
		t.Fatalf("rustle ca: exit %d: %s", code, errb.String())
	}
	certPath, keyPath := filepath.Join(dir, intercept.CACertFile), filepath.Join(dir, intercept.CAKeyFile)
	if !strings.Contains(out.String(), certPath) || !strings.Contains(out.String(), "ca_key = ") {
		t.Errorf("output %q does not say where the CA is and how to use it", out.String())
	}
	ca, err := intercept.LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if cn := ca.Certificate().Subject.CommonName; cn != "test interception CA" {
		t.Errorf("common name %q", cn)
	}
	errb.Reset()
	if code := run([]string{"ca", dir}, nil, &out, &errb); code != 1 || !strings.Contains(errb.String(), "already exists") {
		t.Errorf("second rustle ca: exit %d, %q", code, errb.String())
	}
	if code := run([]string{"ca"}, nil, &out, &errb); code != 2 {
		t.Errorf("rustle ca without DIR: exit %d", code)
	}
}
