package config

import (
	"runtime"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// exampleFile is the documented example configuration, the specification
// of every key and default.
const exampleFile = "../../rustle.example.toml"

// documentedDefaults is what rustle.example.toml says each key defaults
// to, written out independently of SetDefaults.
func documentedDefaults() Config {
	return Config{
		Workers:           0,
		SocketBufferBytes: 0,
		Forwarded:         "none",
		Via:               false,
		MaxHeaderBytes:    65536,
		GCPercent:         25,
		GCFloorBytes:      4194304,
		Log:               Log{Level: "info", Format: "text"},
		AccessLog:         AccessLog{Format: "text"},
		Metrics:           Metrics{MaxUsers: 100},
		Timeouts: Timeouts{
			ReadHeader:     Duration{30 * time.Second},
			ClientHello:    Duration{10 * time.Second},
			QUICHandshake:  Duration{10 * time.Second},
			Connect:        Duration{10 * time.Second},
			ResponseHeader: Duration{60 * time.Second},
			IdleClient:     Duration{60 * time.Second},
			IdleTunnel:     Duration{time.Hour},
			Write:          Duration{60 * time.Second},
			Drain:          Duration{15 * time.Second},
			UDPIdle:        Duration{60 * time.Second},
		},
		Upstream: Upstream{MaxIdlePerHost: 64, MaxIdle: 4096, IdleTimeout: Duration{90 * time.Second}},
		HTTP2: HTTP2{MaxConcurrentStreams: 100, MaxHeaderListSize: 65536, InitialStreamWindow: 262144,
			InitialConnWindow: 1048576, MaxFrameSize: 16384},
		HTTP3: HTTP3{MaxStreams: 100, MaxFlows: 64, MaxListenerFlows: 10000, RetryThreshold: 64,
			UDPTemplate: "/.well-known/masque/udp/{target_host}/{target_port}/"},
		Auth:  Auth{Realm: "rustle", CacheTTL: Duration{5 * time.Minute}, CacheSize: 10000},
		ACL:   ACL{Default: "deny", Mode: "enforce"},
		Lists: Lists{Refresh: Duration{time.Hour}, Timeout: Duration{30 * time.Second}, MaxBytes: 64 << 20},
		Limits: Limits{
			MaxTLSHandshakes:       256,
			AuthFailures:           10,
			AuthFailuresPerAddress: 50,
			AuthFailureWindow:      Duration{time.Minute},
			AuthCooldown:           Duration{5 * time.Minute},
		},
		DNS: DNS{Timeout: Duration{2 * time.Second}, MaxTTL: Duration{time.Hour}, NegativeTTL: Duration{30 * time.Second},
			CacheSize: 10000},
		Quota:     Quota{SaveInterval: Duration{time.Minute}},
		Cluster:   Cluster{SyncInterval: Duration{time.Second}, Timeout: Duration{500 * time.Millisecond}},
		Intercept: Intercept{CacheSize: 4096, UpstreamIdle: Duration{5 * time.Second}},
	}
}

func TestSetDefaults(t *testing.T) {
	tests := []struct {
		name string
		in   Config
		want func() Config
	}{
		{
			name: "zero",
			in:   Config{},
			want: documentedDefaults,
		},
		{
			name: "listeners named and given a protocol",
			in: Config{Listen: []Listener{
				{Address: "127.0.0.1:3128"},
				{Name: "mine", Address: "[::1]:8080", Protocol: "http", Auth: "none"},
			}},
			want: func() Config {
				c := documentedDefaults()
				c.Listen = []Listener{
					{Name: "http 127.0.0.1:3128", Address: "127.0.0.1:3128", Protocol: "http"},
					{Name: "mine", Address: "[::1]:8080", Protocol: "http", Auth: "none"},
				}
				return c
			},
		},
		{
			name: "set values kept",
			in: Config{
				Workers: 3, MaxHeaderBytes: 1024, Forwarded: "rfc7239",
				Log:      Log{Level: "debug", Format: "json"},
				Timeouts: Timeouts{Connect: Duration{time.Second}, Drain: Duration{-time.Second}},
				Upstream: Upstream{MaxIdlePerHost: -1},
				Auth:     Auth{Realm: "r", CacheSize: 5},
			},
			want: func() Config {
				c := documentedDefaults()
				c.Workers, c.MaxHeaderBytes, c.Forwarded = 3, 1024, "rfc7239"
				c.Log = Log{Level: "debug", Format: "json"}
				c.Timeouts.Connect = Duration{time.Second}
				c.Timeouts.Drain = Duration{-time.Second} // Validate's business
				c.Upstream.MaxIdlePerHost = -1
				c.Auth.Realm, c.Auth.CacheSize = "r", 5
				return c
			},
		},
		{
			name: "per-address auth failures follow auth_failures",
			in:   Config{Limits: Limits{AuthFailures: 4}},
			want: func() Config {
				c := documentedDefaults()
				c.Limits.AuthFailures, c.Limits.AuthFailuresPerAddress = 4, 20
				return c
			},
		},
		{
			name: "auth failures off: per address off too",
			in:   Config{Limits: Limits{AuthFailures: -1}},
			want: func() Config {
				c := documentedDefaults()
				c.Limits.AuthFailures, c.Limits.AuthFailuresPerAddress = -1, -1
				return c
			},
		},
		{
			name: "per-address auth failures kept",
			in:   Config{Limits: Limits{AuthFailures: -1, AuthFailuresPerAddress: 7}},
			want: func() Config {
				c := documentedDefaults()
				c.Limits.AuthFailures, c.Limits.AuthFailuresPerAddress = -1, 7
				return c
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := tt.in
			c.SetDefaults()
			if diff := cmp.Diff(tt.want(), c, ignoreLocation); diff != "" {
				t.Errorf("SetDefaults (-want +got):\n%s", diff)
			}
			again := c
			again.Listen = append([]Listener(nil), c.Listen...)
			again.SetDefaults()
			if diff := cmp.Diff(c, again, ignoreLocation); diff != "" {
				t.Errorf("second SetDefaults changed the config (-first +second):\n%s", diff)
			}
		})
	}
}

func TestDefault(t *testing.T) {
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	want := documentedDefaults()
	want.Listen = []Listener{{Name: "http 127.0.0.1:3128", Address: "127.0.0.1:3128", Protocol: "http"}}
	if diff := cmp.Diff(&want, c, ignoreLocation); diff != "" {
		t.Errorf("Default() (-want +got):\n%s", diff)
	}
	c.Listen[0].Address = "changed:1"
	if got := Default().Listen[0].Address; got != "127.0.0.1:3128" {
		t.Errorf("Default() shares state between calls: address %q after changing an earlier result", got)
	}
}

// TestExampleFile checks that the example file parses, validates and says
// what SetDefaults does: its values are the documented defaults.
func TestExampleFile(t *testing.T) {
	c, err := Load(exampleFile)
	if err != nil {
		t.Fatalf("Load(%s): %v", exampleFile, err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	want := documentedDefaults()
	want.Listen = []Listener{{Name: "main", Address: "127.0.0.1:3128", Protocol: "http", Users: []string{},
		Egress: ListenerEgress{Bind: []string{}}}}
	want.DNS.Resolvers, want.DNS.Hosts = []string{}, map[string][]string{}
	want.Egress.Bind = []string{}
	want.Auth.Htpasswd = []string{}
	want.AllowPrivate = []string{}
	want.ACL.Groups = map[string][]string{}
	want.Lists.AllowPrivate = []string{}
	if diff := cmp.Diff(&want, c, ignoreLocation); diff != "" {
		t.Errorf("example file differs from the documented defaults (-want +got):\n%s", diff)
	}
}

func TestWorkerCount(t *testing.T) {
	for _, tt := range []struct {
		workers, want int
	}{
		{0, runtime.GOMAXPROCS(0)},
		{-1, runtime.GOMAXPROCS(0)},
		{7, 7},
	} {
		if got := (&Config{Workers: tt.workers}).WorkerCount(); got != tt.want {
			t.Errorf("WorkerCount with workers = %d: %d, want %d", tt.workers, got, tt.want)
		}
	}
}

func TestEffectiveAuth(t *testing.T) {
	users := Auth{Users: []User{{Name: "a", Password: "p"}}}
	files := Auth{Htpasswd: []string{"/etc/rustle/htpasswd"}}
	tests := []struct {
		name    string
		auth    Auth
		listen  string
		urlUser bool // the listener has a -L URL's user
		want    string
	}{
		{"no users", Auth{}, "", false, "none"},
		{"inline users", users, "", false, "basic"},
		{"htpasswd files", files, "", false, "basic"},
		{"explicit none with users", users, "none", false, "none"},
		{"explicit basic", Auth{}, "basic", false, "basic"},
		{"-L user", Auth{}, "", true, "basic"},
		{"-L user, explicit none", Auth{}, "none", true, "none"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &Config{Auth: tt.auth}
			l := Listener{Auth: tt.listen}
			if tt.urlUser {
				l.URLUser = &User{Name: "dave", Password: "d"}
			}
			if got := c.EffectiveAuth(l); got != tt.want {
				t.Errorf("EffectiveAuth = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDurationText(t *testing.T) {
	var d Duration
	if err := d.UnmarshalText([]byte("1m30s")); err != nil || d.Duration != 90*time.Second {
		t.Errorf("UnmarshalText(1m30s) = %v, %v; want 1m30s", d.Duration, err)
	}
	if err := d.UnmarshalText([]byte("90")); err == nil {
		t.Errorf("UnmarshalText(90) succeeded; a duration needs a unit")
	}
	b, err := Duration{90 * time.Second}.MarshalText()
	if err != nil || string(b) != "1m30s" {
		t.Errorf("MarshalText = %q, %v; want 1m30s", b, err)
	}
}

// ignoreLocation leaves out of comparisons where a Config was parsed from.
var ignoreLocation = cmpopts.IgnoreUnexported(Config{})
