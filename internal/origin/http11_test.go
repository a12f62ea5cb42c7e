package origin

import (
	"testing"

	"github.com/rustle-proxy/rustle/internal/http1"
)

// TestOffersConnectionAuth checks which 401s ask for an authentication
// of the connection (NTLM, Negotiate): the scheme token in any case,
// among other challenges of the same field or of other fields; not a
// scheme's name in a quoted parameter, nor an auth-param named so, nor
// another field.
func TestOffersConnectionAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		fields string
		want   bool
	}{
		{"ntlm", "WWW-Authenticate: NTLM\r\n", true},
		{"negotiate", "WWW-Authenticate: Negotiate\r\n", true},
		{"lower case", "www-authenticate: ntlm\r\n", true},
		{"mixed case scheme", "WWW-Authenticate: nEgOtIaTe\r\n", true},
		{"ntlm challenge", "WWW-Authenticate: NTLM TlRMTVNTUAACAAAAAAAAADAAAAABAgAAASNFZ4mrze8AAAAAAAAAAAAAAAAwAAAA\r\n", true},
		{"negotiate token68", "WWW-Authenticate: Negotiate oYH1MIHyoAMKAQ==\r\n", true},
		{"after basic", "WWW-Authenticate: Basic realm=\"intranet\", NTLM\r\n", true},
		{"after params", "WWW-Authenticate: Digest realm=\"x\", nonce=\"y\", qop=\"auth\", Negotiate\r\n", true},
		{"second line", "WWW-Authenticate: Basic realm=\"x\"\r\nWWW-Authenticate: NTLM\r\n", true},
		{"iis", "WWW-Authenticate: Negotiate\r\nWWW-Authenticate: NTLM\r\n", true},
		{"spaces and empty elements", "WWW-Authenticate: ,  , \t NTLM  ,\r\n", true},
		{"basic", "WWW-Authenticate: Basic realm=\"x\"\r\n", false},
		{"bearer", "WWW-Authenticate: Bearer realm=\"api\", error=\"invalid_token\"\r\n", false},
		{"in a quoted string", "WWW-Authenticate: Basic realm=\"NTLM, Negotiate\"\r\n", false},
		{"escaped quote", "WWW-Authenticate: Basic realm=\"a\\\", NTLM\"\r\n", false},
		{"an auth-param", "WWW-Authenticate: Digest ntlm=1, negotiate = \"x\"\r\n", false},
		{"longer token", "WWW-Authenticate: NTLMv2, Negotiate2\r\n", false},
		{"another field", "Proxy-Authenticate: NTLM\r\nX-Auth: Negotiate\r\n", false},
		{"none", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h http1.Head
			if err := h.ParseResponse([]byte("HTTP/1.1 401 Unauthorized\r\n" + tt.fields + "Content-Length: 0\r\n\r\n")); err != nil {
				t.Fatal(err)
			}
			if got := offersConnectionAuth(&h); got != tt.want {
				t.Errorf("offersConnectionAuth(%q) = %v, want %v", tt.fields, got, tt.want)
			}
		})
	}
}
