//go:build linux

package main

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
)

// gostTestEnv returns an env with the campaign's credentials and TLS
// files as fill's, and a gost binary path.
func gostTestEnv() *env {
	return &env{
		user: "bench", pass: "0123456789abcdef",
		certFile: "/tmp/x/tls/server.pem", keyFile: "/tmp/x/tls/server.key",
		gostBin: "/opt/gost/gost",
	}
}

func TestGostConf(t *testing.T) {
	// gost.json as gost reads it (x/config: services[].handler.auth,
	// handler.metadata, listener.tls.certFile/keyFile); unknown fields
	// are an error, so that a renamed key shows here.
	type conf struct {
		Log struct {
			Level string `json:"level"`
		} `json:"log"`
		Services []struct {
			Name    string `json:"name"`
			Addr    string `json:"addr"`
			Handler struct {
				Type string `json:"type"`
				Auth struct {
					Username string `json:"username"`
					Password string `json:"password"`
				} `json:"auth"`
				Metadata map[string]any `json:"metadata"`
			} `json:"handler"`
			Listener struct {
				Type string `json:"type"`
				TLS  *struct {
					CertFile string `json:"certFile"`
					KeyFile  string `json:"keyFile"`
				} `json:"tls"`
			} `json:"listener"`
		} `json:"services"`
	}
	cases := []struct {
		test                   string
		handler, listener      string
		tls, upstreamKeepAlive bool
	}{
		{"http-1k", "http", "tcp", false, true},
		{"connect-bulk", "http", "tcp", false, true},
		{"ws-64", "http", "tcp", false, true},
		{"cores-2", "http", "tcp", false, true},
		{"socks-bulk", "socks5", "tcp", false, false},
		{"https-1k", "http", "tls", true, true},
		{"https-mem", "http", "tls", true, true},
		{"wss-64", "http", "tls", true, true},
		{"h2-1k", "http2", "http2", true, false},
		{"h2-connect-bulk", "http2", "http2", true, false},
		{"h2-mem", "http2", "http2", true, false},
	}
	for _, tt := range cases {
		t.Run(tt.test, func(t *testing.T) {
			e := gostTestEnv()
			e.test = testByID(t, tt.test)
			dir := t.TempDir()
			argv, environ, err := gostCommand(e, dir, e.test.listener, 3128, 1)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "gost.json")
			if want := []string{"/opt/gost/gost", "-C", path}; !slices.Equal(argv, want) || len(environ) != 0 {
				t.Errorf("command %q %q, want %q and no environment", argv, environ, want)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var c conf
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				t.Fatalf("decode gost.json: %v\n%s", err, b)
			}
			if c.Log.Level != "error" {
				t.Errorf("log level %q, want error", c.Log.Level)
			}
			if len(c.Services) != 1 {
				t.Fatalf("%d services, want 1:\n%s", len(c.Services), b)
			}
			s := c.Services[0]
			if s.Addr != "127.0.0.1:3128" {
				t.Errorf("addr %q, want 127.0.0.1:3128", s.Addr)
			}
			if s.Handler.Type != tt.handler || s.Listener.Type != tt.listener {
				t.Errorf("handler %q listener %q, want %q %q", s.Handler.Type, s.Listener.Type, tt.handler, tt.listener)
			}
			if s.Handler.Auth.Username != "bench" || s.Handler.Auth.Password != "0123456789abcdef" {
				t.Errorf("auth %+v, want the campaign's user", s.Handler.Auth)
			}
			switch {
			case tt.tls && (s.Listener.TLS == nil || s.Listener.TLS.CertFile != "/tmp/x/tls/server.pem" || s.Listener.TLS.KeyFile != "/tmp/x/tls/server.key"):
				t.Errorf("listener tls %+v, want the campaign's certificate and key", s.Listener.TLS)
			case !tt.tls && s.Listener.TLS != nil:
				t.Errorf("plain listener has tls %+v", s.Listener.TLS)
			}
			if got := s.Handler.Metadata["keepalive"] == true; got != tt.upstreamKeepAlive {
				t.Errorf("handler metadata %v: keepalive %v, want %v", s.Handler.Metadata, got, tt.upstreamKeepAlive)
			}
		})
	}
}

func TestGostConfUnknownListener(t *testing.T) {
	if _, _, err := gostCommand(gostTestEnv(), t.TempDir(), "quic", 3128, 1); err == nil {
		t.Error("gostCommand for a \"quic\" port: no error")
	}
}

func TestDefaultProxyList(t *testing.T) {
	if got := defaultProxyList(false); got != defaultProxies || strings.Contains(got, "gost") {
		t.Errorf("default list without a gost binary %q, want %q", got, defaultProxies)
	}
	if got, want := defaultProxyList(true), "rustle,squid,tinyproxy,dante,mitmproxy,gost,none"; got != want {
		t.Errorf("default list with a gost binary %q, want %q", got, want)
	}
}

func TestGostBinary(t *testing.T) {
	t.Setenv(gostEnv, "/from/env/gost")
	if got := gostBinary("/from/flag/gost"); got != "/from/flag/gost" {
		t.Errorf("gostBinary with -gost: %q, want the flag's", got)
	}
	if got := gostBinary(""); got != "/from/env/gost" {
		t.Errorf("gostBinary without -gost: %q, want $%s", got, gostEnv)
	}
	t.Setenv(gostEnv, "")
	if got := gostBinary(""); got != "" {
		t.Errorf("gostBinary with neither: %q, want none", got)
	}
}

func TestCheckGost(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "gost")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "gost.txt")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	withGost := []*proxyDef{proxyByName("rustle"), proxyByName("gost")}
	cases := []struct {
		name string
		defs []*proxyDef
		bin  string
		want string // "" = no error, else a part of the error
	}{
		{"not asked for", []*proxyDef{proxyByName("rustle"), proxyByName("squid")}, "", ""},
		{"no binary", withGost, "", "bench/README.md"},
		{"missing file", withGost, filepath.Join(dir, "nothing"), "no such file"},
		{"not executable", withGost, plain, "not an executable"},
		{"a directory", withGost, dir, "not an executable"},
		{"binary", withGost, exe, ""},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			err := checkGost(tt.defs, tt.bin)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("checkGost: %v, want no error", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("checkGost: %v, want an error with %q", err, tt.want)
			}
		})
	}
}

func TestGostVersion(t *testing.T) {
	line := "gost 3.3.0 (go1.26.8 linux/amd64)"
	bi := &buildinfo.BuildInfo{
		Deps: []*debug.Module{
			{Path: "github.com/go-gost/core", Version: "v0.6.0"},
			{Path: "github.com/go-gost/gosocks5", Version: "v0.5.0"},
			{Path: "github.com/go-gost/x", Version: "v0.15.1", Replace: &debug.Module{Path: "../x", Version: "(devel)"}},
		},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "55bb214a94d0592785c88fc75257505ecc58e057"},
			{Key: "vcs.time", Value: "2026-07-29T15:06:15Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	cases := []struct {
		name, v string
		bi      *buildinfo.BuildInfo
		want    string
	}{
		{"build info", line + "\n", bi, line + "; source commit 55bb214a94d0 of 2026-07-29T15:06:15Z, tree modified, github.com/go-gost/core v0.6.0, github.com/go-gost/x v0.15.1 => ../x"},
		{"no build info", line, nil, line},
		{"no vcs, no go-gost modules", line, &buildinfo.BuildInfo{}, line},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			if got := gostVersion(tt.v, tt.bi); got != tt.want {
				t.Errorf("gostVersion:\n got %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestPrepareGost(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "gost")
	// A stand-in without Go build information: its -V line only.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n[ \"$1\" = -V ] && echo 'gost 3.3.0 (go1.26.8 linux/amd64)'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	e := gostTestEnv()
	e.gostBin = bin
	v, err := prepareGost(context.Background(), e)
	if err != nil || v != "gost 3.3.0 (go1.26.8 linux/amd64)" {
		t.Errorf("prepareGost: %q, %v", v, err)
	}
	e.gostBin = ""
	if _, err := prepareGost(context.Background(), e); err == nil || !strings.Contains(err.Error(), "bench/README.md") {
		t.Errorf("prepareGost without a binary: %v, want the build hint", err)
	}
}
