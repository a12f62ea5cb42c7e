package config

import (
	"crypto/tls"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestValidateKeyExchanges(t *testing.T) {
	https := func(kx ...string) Listener {
		return Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c", Key: "k"}, KeyExchanges: append([]string{}, kx...)}
	}
	tests := []struct {
		name string
		l    Listener
		want []string // keys of the errors
	}{
		{"left out", Listener{Address: "127.0.0.1:8443", Protocol: "https", TLS: ListenerTLS{Cert: "c", Key: "k"}}, nil},
		{"X25519 first", https("X25519", "X25519MLKEM768"), nil},
		{"every one", https("X25519MLKEM768", "SecP256r1MLKEM768", "SecP384r1MLKEM1024", "X25519", "CurveP256", "CurveP384", "CurveP521"), nil},
		{"empty", https(), []string{"listen[0].key_exchanges"}},
		{"unknown", https("X25519", "x25519", "P-256"), []string{"listen[0].key_exchanges[1]", "listen[0].key_exchanges[2]"}},
		{"twice", https("X25519", "CurveP256", "X25519"), []string{"listen[0].key_exchanges[2]"}},
		{"on http", Listener{Address: "127.0.0.1:3128", Protocol: "http", KeyExchanges: []string{"X25519"}}, []string{"listen[0].key_exchanges"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Listen = []Listener{tt.l}
			if diff := cmp.Diff(tt.want, errorKeys(t, c.Validate())); diff != "" {
				t.Errorf("error keys (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateKeyExchangesMessages checks that key_exchanges errors name
// the key, its line, and what is wrong.
func TestValidateKeyExchangesMessages(t *testing.T) {
	src := "[[listen]]\naddress = \"127.0.0.1:8443\"\nprotocol = \"https\"\ntls = { cert = \"c\", key = \"k\" }\n" +
		"key_exchanges = [\"X25519\", \"x25519mlkem768\", \"X25519\"]\n\n" +
		"[[listen]]\naddress = \"127.0.0.1:3128\"\nkey_exchanges = [\"X25519\"]\n\n" +
		"[[listen]]\naddress = \"127.0.0.1:8444\"\nprotocol = \"https\"\ntls = { cert = \"c\", key = \"k\" }\nkey_exchanges = []\n"
	c, err := Parse([]byte(src), "a.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		`a.toml:5: listen[0].key_exchanges[1]: "x25519mlkem768" is not one of X25519MLKEM768, SecP256r1MLKEM768, SecP384r1MLKEM1024, X25519, CurveP256, CurveP384, CurveP521`,
		`a.toml:5: listen[0].key_exchanges[2]: "X25519" is listed twice`,
		`a.toml:9: listen[1].key_exchanges: is only for https listeners, not "http"`,
		`a.toml:15: listen[2].key_exchanges: is empty: list key exchanges such as "X25519MLKEM768", "X25519", or leave the key out for Go's default`,
	}
	if diff := cmp.Diff(want, errorStrings(t, c.Validate())); diff != "" {
		t.Errorf("Validate messages (-want +got):\n%s", diff)
	}
}

func TestKeyExchangeIDs(t *testing.T) {
	if got := (Listener{}).KeyExchangeIDs(); got != nil {
		t.Errorf("left out: %v, want nil (Go's default)", got)
	}
	got := Listener{KeyExchanges: []string{"X25519", "X25519MLKEM768", "CurveP256"}}.KeyExchangeIDs()
	if diff := cmp.Diff([]tls.CurveID{tls.X25519, tls.X25519MLKEM768, tls.CurveP256}, got); diff != "" {
		t.Errorf("KeyExchangeIDs (-want +got):\n%s", diff)
	}
}

func TestKeyExchangesStrictDecoding(t *testing.T) {
	src := "[[listen]]\naddress = \"127.0.0.1:8443\"\nprotocol = \"https\"\ntls = { cert = \"c\", key = \"k\" }\nkey_exchange = [\"X25519\"]\n"
	if _, err := Parse([]byte(src), "a.toml"); err == nil {
		t.Fatal("Parse accepted the misspelt key key_exchange")
	}
	src = "[[listen]]\naddress = \"127.0.0.1:8443\"\nprotocol = \"https\"\ntls = { cert = \"c\", key = \"k\" }\nkey_exchanges = \"X25519\"\n"
	if _, err := Parse([]byte(src), "a.toml"); err == nil {
		t.Fatal("Parse accepted a string for key_exchanges")
	}
}
