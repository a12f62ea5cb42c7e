package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/BurntSushi/toml"
)

func TestSelectTests(t *testing.T) {
	tests := []struct {
		list    string
		want    []string
		wantErr bool
	}{
		{list: "all", want: []string{"http-1k", "http-10k", "http-1k-newconn", "http-1m", "http-10m", "connect-bulk", "mem-tunnels"}},
		{list: "connect-bulk,http-1k", want: []string{"http-1k", "connect-bulk"}},
		{list: "cpu-1k", want: []string{"http-1k"}},
		{list: "mem-9000, http-1k", want: []string{"http-1k", "mem-tunnels"}},
		{list: "http-2k", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.list, func(t *testing.T) {
			got, err := selectTests(tt.list)
			if (err != nil) != tt.wantErr {
				t.Fatalf("selectTests(%q) error = %v, wantErr %v", tt.list, err, tt.wantErr)
			}
			var ids []string
			for _, td := range got {
				ids = append(ids, td.id)
			}
			if strings.Join(ids, ",") != strings.Join(tt.want, ",") {
				t.Errorf("selectTests(%q) = %v, want %v", tt.list, ids, tt.want)
			}
		})
	}
}

func TestTestTable(t *testing.T) {
	seen := map[string]bool{}
	for _, td := range tests {
		selects := 0
		for _, r := range td.rows {
			if seen[r.ID] {
				t.Errorf("row %s appears twice", r.ID)
			}
			seen[r.ID] = true
			if r.Test != td.id || r.Section == "" || r.Title == "" || r.Unit == "" {
				t.Errorf("row %s: incomplete %+v", r.ID, r)
			}
			if r.Selects {
				selects++
			}
		}
		if selects != 1 {
			t.Errorf("test %s: %d rows select the level, want 1", td.id, selects)
		}
		switch td.kind {
		case kindHold:
			if len(td.steps) == 0 {
				t.Errorf("test %s: no steps", td.id)
			}
		default:
			if len(td.levels) == 0 || len(td.quickLevels) == 0 {
				t.Errorf("test %s: no levels", td.id)
			}
		}
		if td.kind == kindWrk && (td.path == "" || td.body <= 0) {
			t.Errorf("test %s: wrk test without path or body size", td.id)
		}
	}
}

func TestQuickEstimateFitsTenMinutes(t *testing.T) {
	pl := plan{repeats: 1, duration: 3 * time.Second, warmup: time.Second, settle: time.Second, quick: true}
	var pairs []pair
	for _, td := range tests {
		for _, p := range proxies {
			pairs = append(pairs, pair{td, p})
		}
	}
	// The quick campaign also waits at most 90 s for other load in all.
	if got := estimate(pl, pairs) + 90*time.Second; got > 9*time.Minute {
		t.Errorf("quick campaign estimate %s with its waits, want under 9 minutes (10 with builds)", got)
	}
}

// fill renders the template bench/<name> as the campaign does.
func fill(t *testing.T, name string, asRoot bool) string {
	t.Helper()
	e := &env{
		benchDir: "..", maxFD: 20000, passwdFile: "/tmp/x/htpasswd",
		user: "bench", pass: "0123456789abcdef", bcryptHash: "$2a$10$abcdefghijklmnopqrstuv",
		asRoot: asRoot, dropUser: "proxy", dropGroup: "proxy",
	}
	path := filepath.Join(t.TempDir(), name)
	if err := e.writeConf(name, path, "/tmp/x/dir", 3128); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSquidConf(t *testing.T) {
	conf := fill(t, "squid.conf", true)
	for _, want := range []string{
		"http_port 127.0.0.1:3128\n",
		"workers 1\n",
		"max_filedescriptors 20000\n",
		"auth_param basic program /usr/lib/squid/basic_ncsa_auth /tmp/x/htpasswd\n",
		"auth_param basic credentialsttl 2 hours\n",
		"http_access allow authenticated\n",
		"cache deny all\n",
		"cache_mem 0 MB\n",
		"via off\n",
		"forwarded_for delete\n",
		"http_upgrade_request_protocols WebSocket allow all\n",
		"http_upgrade_request_protocols websocket allow all\n",
		"tcp_recv_bufsize 1 MB\n",
		"read_ahead_gap 1 MB\n",
		"access_log none\n",
		"pid_filename /tmp/x/dir/squid.pid\n",
		"cache_effective_user proxy\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("squid.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, bad := range []string{"cache_dir", "SSL_ports", "{{"} {
			if strings.Contains(line, bad) {
				t.Errorf("squid.conf has %q in line %q", bad, line)
			}
		}
	}
	if strings.Contains(fill(t, "squid.conf", false), "cache_effective_user") {
		t.Error("squid.conf sets cache_effective_user when not run as root")
	}
}

func TestTinyproxyConf(t *testing.T) {
	conf := fill(t, "tinyproxy.conf", true)
	for _, want := range []string{
		"User proxy\n", "Group proxy\n", "Listen 127.0.0.1\n", "Port 3128\n", "MaxClients 200000\n",
		"LogLevel Critical\n", "DisableViaHeader Yes\n", "BasicAuth bench 0123456789abcdef\n",
		`PidFile "/tmp/x/dir/tinyproxy.pid"` + "\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("tinyproxy.conf lacks %q:\n%s", want, conf)
		}
	}
	for _, line := range strings.Split(conf, "\n") {
		if strings.HasPrefix(line, "ConnectPort") {
			t.Errorf("tinyproxy.conf restricts CONNECT ports: %q", line)
		}
	}
}

func TestRustleConf(t *testing.T) {
	var c struct {
		Workers           int      `toml:"workers"`
		SocketBufferBytes int64    `toml:"socket_buffer_bytes"`
		AllowPrivate      []string `toml:"allow_private"`
		Log               struct {
			Level string `toml:"level"`
		} `toml:"log"`
		Limits struct {
			MaxConnections int `toml:"max_connections"`
		} `toml:"limits"`
		Auth struct {
			Users []struct {
				Name   string `toml:"name"`
				Bcrypt string `toml:"bcrypt"`
			} `toml:"users"`
		} `toml:"auth"`
		Listen []struct {
			Name     string `toml:"name"`
			Address  string `toml:"address"`
			Protocol string `toml:"protocol"`
			Auth     string `toml:"auth"`
		} `toml:"listen"`
	}
	md, err := toml.Decode(fill(t, "rustle.toml", true), &c)
	if err != nil {
		t.Fatal(err)
	}
	if und := md.Undecoded(); len(und) > 0 {
		t.Errorf("rustle.toml keys not checked here: %v", und)
	}
	if c.Workers != 1 || c.SocketBufferBytes != 1048576 || c.Log.Level != "error" ||
		len(c.AllowPrivate) != 1 || c.AllowPrivate[0] != "127.0.0.0/8" || c.Limits.MaxConnections != -1 {
		t.Errorf("rustle.toml globals = %+v", c)
	}
	if len(c.Auth.Users) != 1 || c.Auth.Users[0].Name != "bench" || c.Auth.Users[0].Bcrypt != "$2a$10$abcdefghijklmnopqrstuv" {
		t.Errorf("rustle.toml users = %+v", c.Auth.Users)
	}
	if len(c.Listen) != 1 || c.Listen[0].Address != "127.0.0.1:3128" || c.Listen[0].Protocol != "http" || c.Listen[0].Auth != "basic" {
		t.Errorf("rustle.toml listeners = %+v", c.Listen)
	}
}
