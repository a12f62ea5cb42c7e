package server

import (
	"bufio"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rustle-proxy/rustle/internal/config"
)

// TestPACServed checks /proxy.pac on the listeners [pac] names: a GET
// (with or without a query) and a HEAD answered 200 with Content-Type
// application/x-ns-proxy-autoconfig, the generated file naming the host
// the client fetched it by, a Host it cannot name refused 400, each
// logged; a listener [pac] does not name, and other paths, answer as a
// proxy does (400: origin-form). An operator's file is served as it
// is, a reload reads it again, and one that does not check is refused
// with its line, the server keeping the file it had.
func TestPACServed(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "proxy.pac")
	const good = "function FindProxyForURL(url, host) { return \"PROXY p.example:1\"; }\n"
	if err := os.WriteFile(file, []byte(good), 0o644); err != nil {
		t.Fatal(err)
	}
	build := func(file string) *config.Config {
		cfg := config.Default()
		cfg.Workers = 1
		cfg.Listen = []config.Listener{{Name: "web", Address: "127.0.0.1:0"}, {Name: "other", Address: "127.0.0.1:0"}}
		cfg.PAC = config.PAC{Listeners: []string{"web"}, Bypass: []string{"<local>"}, File: file}
		if file != "" {
			cfg.PAC.Bypass = nil
		}
		cfg.SetDefaults()
		if err := cfg.Validate(); err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	access := &logBuffer{}
	srv, addrs := startLogged(t, build(""), slog.New(slog.DiscardHandler), access)
	get := func(addr, method, target, host string) (*http.Response, string) {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		io.WriteString(c, method+" "+target+" HTTP/1.1\r\nHost: "+host+"\r\nConnection: close\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: method})
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	web := addrs["web"]
	for _, target := range []string{"/proxy.pac", "/proxy.pac?v=1"} {
		resp, body := get(web, "GET", target, web)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ns-proxy-autoconfig" ||
			!strings.Contains(body, `return "PROXY `+web+`";`) {
			t.Errorf("GET %s: %d %q\n%s", target, resp.StatusCode, resp.Header, body)
		}
	}
	if resp, body := get(web, "GET", "/proxy.pac", "proxy.example"); !strings.Contains(body, `"PROXY proxy.example:`+web[strings.LastIndexByte(web, ':')+1:]+`"`) {
		t.Errorf("GET with a Host without a port: %d\n%s", resp.StatusCode, body)
	}
	if resp, body := get(web, "HEAD", "/proxy.pac", web); resp.StatusCode != 200 || body != "" || resp.ContentLength <= 0 {
		t.Errorf("HEAD: %d %d %q", resp.StatusCode, resp.ContentLength, body)
	}
	if resp, _ := get(web, "GET", "/proxy.pac", `x";alert(1);"`); resp.StatusCode != 400 {
		t.Errorf("a Host the file cannot name: %d, want 400", resp.StatusCode)
	}
	for _, tc := range []struct{ addr, target string }{{addrs["other"], "/proxy.pac"}, {web, "/wpad.dat"}} {
		if resp, _ := get(tc.addr, "GET", tc.target, web); resp.StatusCode != 400 {
			t.Errorf("GET %s on %s: %d, want 400", tc.target, tc.addr, resp.StatusCode)
		}
	}
	waitJSONRecord(t, access, func(r map[string]any) bool {
		return r["listener"] == "web" && r["target"] == "/proxy.pac" && r["status"] == float64(200) && r["bytes_down"].(float64) > 0
	})

	t.Run("a file, reloaded", func(t *testing.T) {
		if err := srv.Reload(build(file)); err != nil {
			t.Fatal(err)
		}
		if _, body := get(web, "GET", "/proxy.pac", web); body != good {
			t.Fatalf("the file: %q", body)
		}
		if err := os.WriteFile(file, []byte("function FindProxyForURL(url, host) {\n\treturn \"DIRECT;\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := srv.Reload(build(file)); err == nil || !strings.Contains(err.Error(), "line 2") {
			t.Fatalf("reload with a broken file: %v; want its line 2", err)
		}
		if _, body := get(web, "GET", "/proxy.pac", web); body != good {
			t.Fatalf("after the refused reload: %q; want the file it had", body)
		}
	})
}
