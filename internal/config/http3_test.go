package config

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateHTTP3(t *testing.T) {
	https := func(c *Config) *Listener {
		c.Listen = []Listener{{Name: "tls", Address: "127.0.0.1:8443", Protocol: "https",
			TLS: ListenerTLS{Cert: "c.pem", Key: "k.pem"}, HTTP3: true}}
		return &c.Listen[0]
	}
	tests := []struct {
		name   string
		modify func(c *Config)
		want   []string
	}{
		{"https with http3", func(c *Config) { https(c) }, nil},
		{"http with http3", func(c *Config) { c.Listen[0].HTTP3 = true }, []string{"listen[0].http3"}},
		{"http3 with proxy_protocol", func(c *Config) { https(c).ProxyProtocol = true }, []string{"listen[0].http3"}},
		{"max_connections negative", func(c *Config) { c.HTTP3.MaxConnections = -1 }, []string{"http3.max_connections"}},
		{"max_streams zero", func(c *Config) { c.HTTP3.MaxStreams = 0 }, []string{"http3.max_streams"}},
		{"max_flows zero", func(c *Config) { c.HTTP3.MaxFlows = 0 }, []string{"http3.max_flows"}},
		{"max_listener_flows negative", func(c *Config) { c.HTTP3.MaxListenerFlows = -5 }, []string{"http3.max_listener_flows"}},
		{"template without port", func(c *Config) { c.HTTP3.UDPTemplate = "/udp/{target_host}/" }, []string{"http3.udp_template"}},
		{"retry_threshold -1: always", func(c *Config) { c.HTTP3.RetryThreshold = -1 }, nil},
		{"retry_threshold -2", func(c *Config) { c.HTTP3.RetryThreshold = -2 }, []string{"http3.retry_threshold"}},
		{"quic_handshake negative", func(c *Config) { c.Timeouts.QUICHandshake.Duration = -1 }, []string{"timeouts.quic_handshake"}},
		{"template in a query", func(c *Config) { c.HTTP3.UDPTemplate = "/masque?h={target_host}&p={target_port}" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.modify(c)
			err := c.Validate()
			if diff := cmp.Diff(tt.want, errorKeys(t, err)); diff != "" {
				t.Errorf("Validate() = %v\nerror keys (-want +got):\n%s", err, diff)
			}
		})
	}
}

func TestParseHTTP3(t *testing.T) {
	c, err := Parse([]byte(`
[http3]
max_connections = 500
max_flows = 8
udp_template = "/masque/{target_host}/{target_port}"

[limits]
max_tls_handshakes = 40

[[listen]]
address = "127.0.0.1:8443"
protocol = "https"
http3 = true
tls = { cert = "c.pem", key = "k.pem" }
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := HTTP3{MaxConnections: 500, MaxStreams: 100, MaxFlows: 8, MaxListenerFlows: 10000, RetryThreshold: 10, UDPTemplate: "/masque/{target_host}/{target_port}"}
	if diff := cmp.Diff(want, c.HTTP3); diff != "" || !c.Listen[0].HTTP3 {
		t.Errorf("[http3] (-want +got):\n%s\nlisten[0].http3 = %v", diff, c.Listen[0].HTTP3)
	}
	if err := c.Validate(); err != nil {
		t.Error(err)
	}
}
