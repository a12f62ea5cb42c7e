package origin

import (
	"strconv"
	"testing"
	"time"

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

// TestH1Origins checks the memory of the origins that asked for
// HTTP/1.1: a key is remembered for h1OnlyFor since it last asked, and
// the map never holds more than maxH1Only keys (the expired ones go
// first, all of them when none has expired).
func TestH1Origins(t *testing.T) {
	t.Parallel()
	var o h1Origins
	now := time.Unix(1_000_000, 0)
	key := func(i int) []byte { return []byte("tls host" + strconv.Itoa(i) + " 127.0.0.1:443") }
	if o.has(key(0), now) {
		t.Fatal("an empty memory has a key")
	}
	o.note(key(0), now)
	if !o.has(key(0), now.Add(h1OnlyFor-time.Second)) || o.has(key(0), now.Add(h1OnlyFor)) || o.has(key(1), now) {
		t.Error("a key is not remembered for h1OnlyFor exactly, or another is")
	}
	o.note(key(0), now.Add(time.Minute)) // asked again: remembered from then
	if !o.has(key(0), now.Add(h1OnlyFor)) {
		t.Error("a key that asked again is forgotten from its first time")
	}
	for i := 1; i < maxH1Only; i++ {
		o.note(key(i), now.Add(h1OnlyFor))
	}
	if len(o.m) != maxH1Only || int(o.n.Load()) != maxH1Only {
		t.Fatalf("%d keys (n %d), want %d", len(o.m), o.n.Load(), maxH1Only)
	}
	// Full: key 0, expired by then, makes room.
	o.note(key(maxH1Only), now.Add(h1OnlyFor+2*time.Minute))
	if len(o.m) != maxH1Only || o.has(key(0), now.Add(h1OnlyFor+2*time.Minute)) || !o.has(key(1), now.Add(h1OnlyFor+2*time.Minute)) {
		t.Errorf("full with one expired: %d keys, key 0 kept %v, key 1 kept %v", len(o.m), o.m[string(key(0))], o.m[string(key(1))])
	}
	// Full, none expired: all go.
	o.note(key(maxH1Only+1), now.Add(h1OnlyFor+3*time.Minute))
	if len(o.m) != 1 || !o.has(key(maxH1Only+1), now.Add(h1OnlyFor+3*time.Minute)) {
		t.Errorf("full with none expired: %d keys, want the new one alone", len(o.m))
	}
}
