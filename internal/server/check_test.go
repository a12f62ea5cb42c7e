package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/bcrypt"

	"github.com/rustle-proxy/rustle/internal/config"
	"github.com/rustle-proxy/rustle/internal/wire"
)

// TestCheckListenerUsersFromFiles checks that a listener's users may come
// from an htpasswd file, and that a name in no file is refused at load
// with the key and its line, by wire.Check and by Reload alike.
func TestCheckListenerUsersFromFiles(t *testing.T) {
	dir := t.TempDir()
	users := filepath.Join(dir, "users")
	hash, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(users, []byte("carol:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	load := func(names string) *config.Config {
		t.Helper()
		path := filepath.Join(dir, "rustle.toml")
		src := "workers = 1\n[auth]\nhtpasswd = [\"users\"]\n\n[[listen]]\nname = \"main\"\naddress = \"127.0.0.1:0\"\nusers = [" + names + "]\n"
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := config.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return c
	}
	good := load(`"carol"`)
	if err := wire.Check(good); err != nil {
		t.Fatalf("Check with carol from the users file: %v", err)
	}
	want := filepath.Join(dir, "rustle.toml") + `:10: listen[0].users[1]: user "erin" is neither in [[auth.users]] nor in an auth.htpasswd file`
	bad := load("\n  \"carol\",\n  \"erin\",\n")
	if err := wire.Check(bad); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Check with erin in no file: %v, want an error ending %q", err, want)
	}
	s := startReloadable(t, good)
	if err := s.Reload(bad); err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("Reload with erin in no file: %v, want an error ending %q", err, want)
	}
}
