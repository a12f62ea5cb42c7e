package config

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestAuthzDefaults checks that [authz] gets its documented defaults
// once a url is set, and stays zero without one.
func TestAuthzDefaults(t *testing.T) {
	c := &Config{}
	c.SetDefaults()
	if c.Authz != (Authz{}) {
		t.Errorf("[authz] without a url = %+v, want zero", c.Authz)
	}
	c = &Config{Authz: Authz{URL: "https://opa.example/v1/data/rustle/authz"}}
	c.SetDefaults()
	want := Authz{URL: "https://opa.example/v1/data/rustle/authz", Timeout: Duration{2 * time.Second}, MaxInFlight: 64,
		CacheSize: 10000, CacheTTL: Duration{time.Minute}, OnError: "deny"}
	if diff := cmp.Diff(want, c.Authz); diff != "" {
		t.Errorf("[authz] defaults (-want +got):\n%s", diff)
	}
}

// TestValidateAuthz checks what [authz] refuses: keys without a url, a
// url that is not https (but http to loopback with insecure_plaintext),
// credentials in it, and values out of range, each with its key.
func TestValidateAuthz(t *testing.T) {
	const opa = "https://opa.example:8181/v1/data/rustle/authz"
	tests := []struct {
		name string
		a    Authz
		want []string
	}{
		{"none", Authz{}, nil},
		{"https", Authz{URL: opa}, nil},
		{"every key", Authz{URL: opa, TLSCA: "/ca.pem", TokenFile: "/t", Timeout: Duration{time.Second}, MaxInFlight: 8,
			CacheSize: -1, CacheTTL: Duration{time.Second}, OnError: "allow"}, nil},
		{"keys without a url", Authz{Timeout: Duration{time.Second}, OnError: "allow", InsecurePlaintext: true},
			[]string{"authz.insecure_plaintext", "authz.timeout", "authz.on_error"}},
		{"http", Authz{URL: "http://127.0.0.1:8181/v1/data/rustle/authz"}, []string{"authz.url"}},
		{"http to loopback", Authz{URL: "http://127.0.0.1:8181/v1/data/rustle/authz", InsecurePlaintext: true}, nil},
		{"http to localhost", Authz{URL: "http://localhost:8181/v1/data/rustle/authz", InsecurePlaintext: true}, nil},
		{"http elsewhere", Authz{URL: "http://opa.example:8181/v1/data/rustle/authz", InsecurePlaintext: true},
			[]string{"authz.insecure_plaintext"}},
		{"insecure_plaintext on https", Authz{URL: opa, InsecurePlaintext: true}, []string{"authz.insecure_plaintext"}},
		{"tls_ca on http", Authz{URL: "http://127.0.0.1:8181/x", InsecurePlaintext: true, TLSCA: "/ca.pem"}, []string{"authz.tls_ca"}},
		{"not a url", Authz{URL: "opa.example"}, []string{"authz.url"}},
		{"another scheme", Authz{URL: "ftp://opa.example/x"}, []string{"authz.url"}},
		{"credentials", Authz{URL: "https://u:p@opa.example/x"}, []string{"authz.url"}},
		{"timeout negative", Authz{URL: opa, Timeout: Duration{-time.Second}}, []string{"authz.timeout"}},
		{"max_in_flight negative", Authz{URL: opa, MaxInFlight: -1}, []string{"authz.max_in_flight"}},
		{"max_in_flight huge", Authz{URL: opa, MaxInFlight: 100000}, []string{"authz.max_in_flight"}},
		{"cache_size -2", Authz{URL: opa, CacheSize: -2}, []string{"authz.cache_size"}},
		{"cache_ttl negative", Authz{URL: opa, CacheTTL: Duration{-time.Second}}, []string{"authz.cache_ttl"}},
		{"on_error", Authz{URL: opa, OnError: "open"}, []string{"authz.on_error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Authz = tt.a
			c.SetDefaults()
			got := errorKeys(t, c.Validate())
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("error keys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestAuthzFile checks [authz] in a file: an unknown key is refused with
// its line, relative paths are resolved against the file's directory,
// and an error names the key's line.
func TestAuthzFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rustle.toml")
	writeTestFile(t, path, `[authz]
url = "https://opa.example/v1/data/rustle/authz"
tls_ca = "opa-ca.pem"
token_file = "opa.token"
on_error = "maybe"
`)
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Authz.TLSCA != filepath.Join(dir, "opa-ca.pem") || c.Authz.TokenFile != filepath.Join(dir, "opa.token") {
		t.Errorf("paths = %q, %q; want them resolved against %s", c.Authz.TLSCA, c.Authz.TokenFile, dir)
	}
	err = c.Validate()
	if err == nil || !strings.Contains(err.Error(), "rustle.toml:5: authz.on_error") {
		t.Errorf("Validate = %v, want authz.on_error at line 5", err)
	}
	writeTestFile(t, path, "[authz]\nurl = \"https://opa.example/\"\nmode = \"audit\"\n")
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "authz.mode") || !strings.Contains(err.Error(), ":3") {
		t.Errorf("Load with an unknown key = %v, want authz.mode refused at line 3", err)
	}
}
