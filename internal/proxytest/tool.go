package proxytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// FindTool returns the path of a tool installed by scripts/deps.sh: on
// PATH, or in GOBIN or GOPATH/bin for Go tools; "" when it is in none.
func FindTool(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{os.Getenv("GOBIN"), goEnv("GOBIN"), filepath.Join(goEnv("GOPATH"), "bin")} {
		if dir == "" {
			continue
		}
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && !st.IsDir() {
			return filepath.Join(dir, name)
		}
	}
	return ""
}

func goEnv(key string) string {
	out, err := exec.Command("go", "env", key).Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// RequireTool returns the path of the program name (see FindTool). When it
// is missing the test is skipped with the package that provides it, or,
// under CI (the environment variable CI is "true", as .ci/run sets it),
// fails: CI installs everything scripts/deps.sh names, so a missing
// program there is a broken setup, not a reason to pass.
func RequireTool(t testing.TB, name, pkg string) string {
	t.Helper()
	if p := FindTool(name); p != "" {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not installed under CI (scripts/deps.sh installs %s)", name, pkg)
	}
	t.Skipf("%s not installed (scripts/deps.sh installs %s)", name, pkg)
	return ""
}

// RequirePython returns Debian's Python (/usr/bin/python3) when it can
// import module, which Debian's package pkg installs: the Python of
// Debian's packages, not another one first on PATH. Without it the test
// is skipped, or under CI (CI=true) failed.
func RequirePython(t testing.TB, module, pkg string) string {
	t.Helper()
	const python = "/usr/bin/python3"
	err := exec.Command(python, "-c", "import "+module).Run()
	if err == nil {
		return python
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s cannot import %s under CI: %v (scripts/deps.sh installs %s)", python, module, err, pkg)
	}
	t.Skipf("%s cannot import %s: %v (scripts/deps.sh installs %s)", python, module, err, pkg)
	return ""
}
