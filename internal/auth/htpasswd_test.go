package auth_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rustle-proxy/rustle/internal/auth"
)

func TestParseHtpasswd(t *testing.T) {
	h := hashOf(t, alicePW)
	hb := "$2b$" + h[4:]
	ha := "$2a$" + h[4:]
	tests := []struct {
		name        string
		in          string
		want        []auth.User
		wantLine    int      // line of the error; 0 = no error
		wantErr     []string // substrings of the error
		unsupported bool     // error wraps ErrUnsupportedHash
	}{
		{name: "empty", in: ""},
		{name: "comments and blanks", in: "# comment\n\n   \n\t# indented comment\n"},
		{name: "users", in: "# users\nalice:" + h + "\n\nbob:" + hb + "\ncarol:" + ha,
			want: []auth.User{{Name: "alice", Bcrypt: h}, {Name: "bob", Bcrypt: hb}, {Name: "carol", Bcrypt: ha}}},
		{name: "crlf and surrounding spaces", in: "  alice:" + h + "  \r\nbob:" + hb + "\r\n",
			want: []auth.User{{Name: "alice", Bcrypt: h}, {Name: "bob", Bcrypt: hb}}},
		{name: "name with space and utf-8", in: "jo ann ☃:" + h + "\n",
			want: []auth.User{{Name: "jo ann ☃", Bcrypt: h}}},

		{name: "missing colon", in: "# x\nalice:" + h + "\nbob" + h + "\n", wantLine: 3, wantErr: []string{"missing ':'"}},
		{name: "empty user", in: ":" + h, wantLine: 1, wantErr: []string{"empty user name"}},
		{name: "control in user", in: "a\x01b:" + h, wantLine: 1, wantErr: []string{"control character"}},
		{name: "empty hash", in: "alice:\n", wantLine: 1, wantErr: []string{"empty hash"}},
		{name: "extra field", in: "alice:" + h + ":x\n", wantLine: 1, wantErr: []string{"malformed bcrypt"}},
		{name: "digest line", in: "alice:rustle:5f4dcc3b5aa765d61d8327deb882cf99\n", wantLine: 1, wantErr: []string{`user "alice"`}, unsupported: true},
		{name: "sha1", in: "\nalice:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n", wantLine: 2, wantErr: []string{"{SHA}", "only bcrypt"}, unsupported: true},
		{name: "ssha", in: "alice:{SSHA}abcdefgh\n", wantLine: 1, wantErr: []string{"{SSHA}"}, unsupported: true},
		{name: "apr1", in: "alice:$apr1$ZjTqBB3f$IF9gdYAGlMrs2fuINjHsz.\n", wantLine: 1, wantErr: []string{"$apr1$"}, unsupported: true},
		{name: "md5 crypt", in: "alice:$1$saltsalt$qjXMvbEw8oaL.CzflDugX/\n", wantLine: 1, wantErr: []string{"MD5-crypt ($1$)"}, unsupported: true},
		{name: "sha256 crypt", in: "alice:$5$rounds=5000$salt$hash\n", wantLine: 1, wantErr: []string{"SHA-256-crypt ($5$)"}, unsupported: true},
		{name: "sha512 crypt", in: "alice:$6$salt$hash\n", wantLine: 1, wantErr: []string{"SHA-512-crypt ($6$)"}, unsupported: true},
		{name: "argon2", in: "alice:$argon2id$v=19$m=65536$x\n", wantLine: 1, wantErr: []string{"crypt $argon2id$"}, unsupported: true},
		{name: "bcrypt 2x", in: "alice:$2x$" + h[4:] + "\n", wantLine: 1, wantErr: []string{"bcrypt variant $2x$"}, unsupported: true},
		{name: "bcrypt 2", in: "alice:$2$" + h[4:] + "\n", wantLine: 1, wantErr: []string{"bcrypt variant $2$"}, unsupported: true},
		{name: "des crypt", in: "alice:rl.3StKT.4T8M\n", wantLine: 1, wantErr: []string{"DES crypt"}, unsupported: true},
		{name: "plain text", in: "alice:password\n", wantLine: 1, wantErr: []string{"unrecognised"}, unsupported: true},
		{name: "short bcrypt", in: "alice:" + h[:59] + "\n", wantLine: 1, wantErr: []string{"malformed bcrypt", "59 characters"}},
		{name: "long bcrypt", in: "alice:" + h + "A\n", wantLine: 1, wantErr: []string{"malformed bcrypt", "61 characters"}},
		{name: "bcrypt cost too low", in: "alice:$2y$03" + h[6:] + "\n", wantLine: 1, wantErr: []string{"cost \"03\""}},
		{name: "bcrypt cost too high", in: "alice:$2y$32" + h[6:] + "\n", wantLine: 1, wantErr: []string{"cost \"32\""}},
		{name: "bcrypt cost not digits", in: "alice:$2y$+4" + h[6:] + "\n", wantLine: 1, wantErr: []string{"cost \"+4\""}},
		{name: "bcrypt no dollar after cost", in: "alice:" + h[:6] + "x" + h[7:] + "\n", wantLine: 1, wantErr: []string{"no '$' after the cost"}},
		{name: "bcrypt bad character", in: "alice:" + h[:59] + "!\n", wantLine: 1, wantErr: []string{"bad character at offset 59"}},
		{name: "duplicate user", in: "alice:" + h + "\n#\nalice:" + hb + "\n", wantLine: 3, wantErr: []string{`"alice" already defined on line 1`}},
		{name: "line too long", in: "alice:" + h + "\n" + strings.Repeat("x", 70000) + "\n", wantLine: 2, wantErr: []string{"read:"}},
	}
	const file = "/etc/rustle/users"
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := auth.ParseHtpasswd(strings.NewReader(tt.in), file)
			if tt.wantLine == 0 {
				if err != nil {
					t.Fatalf("ParseHtpasswd: %v", err)
				}
				if diff := cmp.Diff(tt.want, got); diff != "" {
					t.Errorf("ParseHtpasswd users (-want +got):\n%s", diff)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseHtpasswd = %v, want error at line %d", got, tt.wantLine)
			}
			var pe *auth.ParseError
			if !errors.As(err, &pe) {
				t.Fatalf("ParseHtpasswd error %v (%T) is not a *ParseError", err, err)
			}
			if pe.File != file || pe.Line != tt.wantLine {
				t.Errorf("ParseError at %s:%d, want %s:%d", pe.File, pe.Line, file, tt.wantLine)
			}
			msg := err.Error()
			prefix := "auth: htpasswd " + file + ":" + strconv.Itoa(tt.wantLine) + ": "
			if !strings.HasPrefix(msg, prefix) {
				t.Errorf("error %q does not start with %q", msg, prefix)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(msg, s) {
					t.Errorf("error %q does not contain %q", msg, s)
				}
			}
			if got := errors.Is(err, auth.ErrUnsupportedHash); got != tt.unsupported {
				t.Errorf("errors.Is(%q, ErrUnsupportedHash) = %v, want %v", msg, got, tt.unsupported)
			}
			if strings.Contains(msg, h[7:]) {
				t.Errorf("error %q quotes the hash", msg)
			}
		})
	}
}
