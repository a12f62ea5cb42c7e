package wire

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/gate"
)

// headerConfig returns a configuration whose route "lb" sets X-Key to
// the content of the file at path, from h.toml: the set is on line 7.
func headerConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	src := "[[listen]]\naddress = \"127.0.0.1:0\"\n\n[[routes]]\nname = \"lb\"\nvia = \"direct\"\n" +
		"request_headers.set = { \"X-Key\" = \"{file:" + path + "}\" }\n"
	cfg, err := config.Parse([]byte(src), "h.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestHeaderFileLoadErrors checks that a header rule's {file:} value
// that cannot be used is refused when the configuration is loaded (Check,
// as Build), naming the key and its line and never a byte of the file: a
// missing file, an empty one, one with a line break inside, one too large
// (a 2 GiB sparse file, of which only the bound is read); and that a good
// one's content, less its trailing line break, is the value.
func TestHeaderFileLoadErrors(t *testing.T) {
	const secret = "s3cr3t-token"
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	huge := filepath.Join(dir, "huge")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(secret)
	if err := f.Truncate(2 << 30); err != nil {
		t.Fatal(err)
	}
	f.Close()
	const key = "h.toml:7: routes[0].request_headers.set.X-Key: "
	for _, tc := range []struct {
		name, path, want string
	}{
		{"missing", filepath.Join(dir, "none"), key + "open " + filepath.Join(dir, "none") + ": no such file or directory"},
		{"empty", write("empty", "\n"), key + filepath.Join(dir, "empty") + " is empty"},
		{"line break inside", write("two-lines", secret+"\nX-Injected: 1\n"), key + filepath.Join(dir, "two-lines") + ": the value has a control character (0x0a) at byte 12"},
		{"too large", huge, key + huge + ": the value is 8195 bytes, over the 8192-byte limit"},
		{"good", write("good", secret+"\r\n"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(headerConfig(t, tc.path))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if err == nil || err.Error() != tc.want {
				t.Fatalf("Check = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("the error %q shows the file's content", err)
			}
		})
	}
}

// TestHeaderFileReload checks that a {file:} value is read at each
// build: a reload (a Build after the previous generation) takes the
// file's new content, which the route's CONNECT to its parents carries.
func TestHeaderFileReload(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	var prev *Generation
	for i := range 2 {
		value := "token-" + strconv.Itoa(i)
		if err := os.WriteFile(path, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		g, err := Build(headerConfig(t, path), &Env{Revoked: new(gate.Registry)}, prev)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Drop)
		if got, want := g.Routes.Routes()[0].ConnectHeader(), "X-Key: "+value+"\r\n"; got != want {
			t.Errorf("build %d: the route's CONNECT fields %q, want %q", i, got, want)
		}
		prev = g
	}
}
