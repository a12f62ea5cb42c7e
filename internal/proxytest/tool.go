package proxytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
