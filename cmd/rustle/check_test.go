package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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

// TestCheckAuditAndLists checks what rustle check says of audit mode and
// lists: the rules in audit mode after OK, a list file read (a missing
// one named with its key and line), and a list URL not fetched (rustle
// fetches it when it starts).
func TestCheckAuditAndLists(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "ads.txt"), []byte("# ads\n.ads.example\n0.0.0.0 tracker.example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const base = "[[listen]]\naddress = \"127.0.0.1:3128\"\n[[acl.rules]]\nname = \"ads\"\naction = \"report\"\n"
	for _, tc := range []struct {
		name, src string
		code      int
		stdout    string
		stderr    string
	}{
		{"report rule, file and URL", base + "hosts_file = \"ads.txt\"\nhosts_url = \"https://lists.invalid/ads.txt\"\n", 0,
			"rustle.toml: OK (1 listener(s), %d worker(s))\n" +
				"audit mode: acl.rules[0] \"ads\": action = \"report\": requests it would deny are let through, logged with would_deny\n", ""},
		{"missing file", base + "hosts_file = \"nope.txt\"\n", 1, "",
			"rustle check: " + filepath.Join(dir, "rustle.toml") + ":6: acl.rules[0].hosts_file: open " + filepath.Join(dir, "nope.txt") + ": no such file or directory\n"},
		{"not a list", base + "clients_file = \"ads.txt\"\n", 1, "",
			"rustle check: " + filepath.Join(dir, "rustle.toml") + ":6: acl.rules[0].clients_file: " + filepath.Join(dir, "ads.txt") +
				": 2 of 2 lines are not entries (line 2: \".ads.example\" is not an IP address or CIDR prefix; line 3: \"0.0.0.0 tracker.example\" is not one entry)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "rustle.toml")
			if err := os.WriteFile(path, []byte(tc.src), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := check([]string{"-c", path}, &stdout, &stderr)
			want := tc.stdout
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, runtime.GOMAXPROCS(0))
				want = strings.Replace(want, "rustle.toml:", path+":", 1)
			}
			if code != tc.code || stdout.String() != want || stderr.String() != tc.stderr {
				t.Errorf("rustle check exit %d\nstdout %q\nstderr %q\nwant exit %d\nstdout %q\nstderr %q",
					code, stdout.String(), stderr.String(), tc.code, want, tc.stderr)
			}
		})
	}
}
