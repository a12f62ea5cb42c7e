package auth_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/rustle-proxy/rustle/internal/auth"
	"github.com/rustle-proxy/rustle/internal/proxytest"
)

// FuzzParseHtpasswd checks that ParseHtpasswd never panics, that its errors
// are *ParseError values naming the file and a line, and that the users it
// accepts are valid and survive being written out and parsed again.
func FuzzParseHtpasswd(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		const file = "fuzz.htpasswd"
		users, err := auth.ParseHtpasswd(bytes.NewReader(data), file)
		if err != nil {
			var pe *auth.ParseError
			if !errors.As(err, &pe) || pe.File != file || pe.Line < 1 || pe.Line > bytes.Count(data, []byte("\n"))+2 {
				t.Fatalf("error %v (%T): want *ParseError naming %s and a line of the input", err, err, file)
			}
			return
		}
		var out strings.Builder
		seen := make(map[string]bool)
		for _, u := range users {
			if u.Name == "" || strings.ContainsAny(u.Name, ":\r\n") || u.Password != "" || len(u.Bcrypt) != 60 || !strings.HasPrefix(u.Bcrypt, "$2") {
				t.Fatalf("ParseHtpasswd accepted bad user %+v", u)
			}
			if seen[u.Name] {
				t.Fatalf("ParseHtpasswd accepted user %q twice", u.Name)
			}
			seen[u.Name] = true
			out.WriteString(u.Name + ":" + u.Bcrypt + "\n")
		}
		again, err := auth.ParseHtpasswd(strings.NewReader(out.String()), file)
		if err != nil {
			t.Fatalf("parse of re-written users: %v", err)
		}
		if diff := cmp.Diff(users, again); diff != "" {
			t.Fatalf("re-parsed users differ (-first +second):\n%s", diff)
		}
	})
}

// refBasic is a second, independent reading of the Basic header syntax Check
// accepts: optional spaces and tabs, the scheme in any case, one or more
// spaces, a token of base64 characters, optional spaces and tabs.
var refBasic = regexp.MustCompile(`^[ \t]*[Bb][Aa][Ss][Ii][Cc] +([A-Za-z0-9+/=]+)[ \t]*$`)

// fuzzUsers are the users of FuzzCheck's Authenticator, with passwords.
var fuzzUsers = map[string]string{"alice": alicePW, "bob": bobPW}

// FuzzCheck checks Check and the header parser against refBasic: Check
// accepts a value exactly when it is a well-formed Basic credential for a
// known user with the right password, and says the same on a second call
// (from the cache).
func FuzzCheck(f *testing.F) {
	a := newAuth(f, auth.Config{Users: []auth.User{
		{Name: "alice", Bcrypt: hashOf(f, alicePW)},
		{Name: "bob", Password: bobPW},
	}})
	f.Fuzz(func(t *testing.T, value []byte) {
		var wantUser string
		wellFormed := false
		var refUser, refPass []byte
		if m := refBasic.FindSubmatch(value); m != nil {
			if dec, err := base64.StdEncoding.Strict().DecodeString(string(m[1])); err == nil {
				if u, p, ok := bytes.Cut(dec, []byte(":")); ok && len(u) > 0 {
					wellFormed, refUser, refPass = true, u, p
					if pw, known := fuzzUsers[string(u)]; known && pw == string(p) && len(value) <= auth.MaxValueLen {
						wantUser = string(u)
					}
				}
			}
		}

		user, pass, ok := auth.ParseBasic(value)
		if ok != wellFormed || !bytes.Equal(user, refUser) || !bytes.Equal(pass, refPass) {
			t.Fatalf("parseBasic(%q) = %q, %q, %v; reference %q, %q, %v", value, user, pass, ok, refUser, refPass, wellFormed)
		}
		wantName := refUser
		if len(value) > auth.MaxValueLen {
			wantName = nil
		}
		if name := auth.AppendBasicUser(nil, value); !bytes.Equal(name, wantName) {
			t.Fatalf("AppendBasicUser(%q) = %q; reference %q", value, name, wantName)
		}
		for i := range 2 {
			gotUser, gotOK := a.Check(value)
			if gotUser != wantUser || gotOK != (wantUser != "") {
				t.Fatalf("call %d: Check(%q) = %q, %v; want %q, %v", i+1, value, gotUser, gotOK, wantUser, wantUser != "")
			}
		}
	})
}

// FuzzBearer checks Authenticate with a token provider on any value: it
// never panics, and accepts only the one valid token the test minted,
// given as a bearer token or as a Basic password.
func FuzzBearer(f *testing.F) {
	key := proxytest.NewECSigner(f, "k")
	tok := key.Mint(f, claims("octo-org/app", "refs/heads/main", time.Hour))
	a := newJWT(f, proxytest.StartJWKS(f, key), nil)
	for _, s := range []string{"Bearer " + tok, "bearer  " + tok + " ", "Bearer " + tok + "=", "Bearer a.b.c", "Bearer ",
		"Basic " + base64.StdEncoding.EncodeToString([]byte("x:"+tok)), "Bearer " + strings.Replace(tok, ".", "..", 1)} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		r := a.Authenticate(value)
		if r.Outcome != auth.Accepted {
			return
		}
		v := bytes.Trim(value, " \t")
		if i := bytes.LastIndexByte(v, ' '); i >= 0 {
			v = v[i+1:]
		}
		if string(v) == tok {
			return
		}
		if dec, err := base64.StdEncoding.DecodeString(string(v)); err == nil {
			if _, pass, ok := bytes.Cut(dec, []byte(":")); ok && string(pass) == tok {
				return
			}
		}
		t.Fatalf("Authenticate(%q) accepted %q: not the minted token", value, r.User)
	})
}
