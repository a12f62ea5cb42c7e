package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/crypto/bcrypt"
)

// TestCheckErrorsNameFileAndLine checks that every error rustle check
// reports about a key of the file, whichever stage finds it (the decoder,
// Validate, or the loading of what the key names), reads as
// docs/operations.md shows it: "FILE:LINE: KEY: problem", with no Go
// package before it.
func TestCheckErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "users"), []byte("carol:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notpem.txt"), []byte("no certificate here\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const listen = "[[listen]]\naddress = \"127.0.0.1:3128\"\n"
	for _, tc := range []struct {
		name, src, want string
	}{
		{"unknown key", listen + "[[listen]]\naddress = \"127.0.0.1:3129\"\nprotocl = \"http\"\n",
			"rustle.toml:5: unknown key listen[1].protocl"},
		{"syntax error", "workers = 1\n[log\nlevel = \"info\"\n" + listen,
			`rustle.toml:2: expected '.' or ']' to end table name, but got '\n' instead`},
		{"bad value", "[log]\nlevel = \"loud\"\n" + listen,
			`rustle.toml:2: log.level: "loud" is not one of debug, info, warn, error`},
		{"listener user in no users file", "[auth]\nhtpasswd = [\"users\"]\n" + listen + "users = [\"carol\", \"erin\"]\n",
			`rustle.toml:5: listen[0].users[1]: user "erin" is neither in [[auth.users]] nor in an auth.htpasswd file`},
		{"bind address not the host's", listen + "[egress]\nbind = [\"192.0.2.254\"]\n",
			"rustle.toml:4: egress.bind[0]: 192.0.2.254 is not an address of this host: configure it on an interface, or set freebind = true"},
		{"dns.ca without a certificate", listen + "[dns]\nresolvers = [\"tls://192.0.2.53\"]\nca = \"notpem.txt\"\n",
			"rustle.toml:5: dns.ca: " + filepath.Join(dir, "notpem.txt") + " holds no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "rustle.toml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			if code := check([]string{"-c", path}, &stdout, &stderr); code != 1 {
				t.Fatalf("rustle check exit %d, want 1\nstdout %s\nstderr %s", code, stdout.String(), stderr.String())
			}
			want := "rustle check: " + dir + string(filepath.Separator) + tc.want + "\n"
			if stderr.String() != want {
				t.Errorf("rustle check said\n%q\nwant\n%q", stderr.String(), want)
			}
		})
	}
}
