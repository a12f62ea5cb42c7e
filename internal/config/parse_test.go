package config

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/google/go-cmp/cmp"
)

// errorStrings returns the messages of the errors joined in err.
func errorStrings(t *testing.T, err error) []string {
	t.Helper()
	if err == nil {
		return nil
	}
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []string{err.Error()}
	}
	var s []string
	for _, e := range j.Unwrap() {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Errorf("joined error %T %q is not a *config.Error", e, e)
		}
		s = append(s, e.Error())
	}
	return s
}

// lines joins its arguments as the lines of a TOML document.
func lines(l ...string) string { return strings.Join(l, "\n") + "\n" }

func TestParseUnknownKeys(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "top level",
			src:  lines(`workers = 2`, `wrokers = 3`),
			want: []string{"rustle.toml:2: unknown key wrokers"},
		},
		{
			name: "in [access_log]",
			src:  lines(`[access_log]`, `enabled = true`, `file = "/var/log/a"`),
			want: []string{"rustle.toml:3: unknown key access_log.file"},
		},
		{
			name: "in [timeouts]",
			src:  lines(`via = true`, ``, `[timeouts]`, `connect = "5s"`, `# a comment`, `conect = "5s"`),
			want: []string{"rustle.toml:6: unknown key timeouts.conect"},
		},
		{
			name: "dotted key at top level",
			src:  lines(`timeouts.connect = "5s"`, `timeouts . "conect" = "5s"`),
			want: []string{"rustle.toml:2: unknown key timeouts.conect"},
		},
		{
			name: "second [[listen]] element",
			src: lines(
				`[[listen]]`,
				`address = "127.0.0.1:1"`,
				`[[listen]]`,
				`address = "127.0.0.1:2"`,
				`alow_open = true`,
			),
			want: []string{"rustle.toml:5: unknown key listen[1].alow_open"},
		},
		{
			name: "same unknown key in two [[listen]] elements",
			src: lines(
				`[[listen]]`,
				`adress = "127.0.0.1:1"`,
				`[[listen]]`,
				`address = "127.0.0.1:2"`,
				`[[listen]]`,
				`adress = "127.0.0.1:3"`,
			),
			want: []string{
				"rustle.toml:2: unknown key listen[0].adress",
				"rustle.toml:6: unknown key listen[2].adress",
			},
		},
		{
			name: "each [[auth.users]]",
			src: lines(
				`[auth]`,
				`realm = "r"`,
				`[[auth.users]]`,
				`name = "alice"`,
				`pasword = "x"`,
				`[[auth.users]]`,
				`name = "bob"`,
				`bcrypt = "$2y$..."`,
				`group = "staff"`,
			),
			want: []string{
				"rustle.toml:5: unknown key auth.users[0].pasword",
				"rustle.toml:9: unknown key auth.users[1].group",
			},
		},
		{
			// URLUser (tagged "-") comes from -L only.
			name: "a -L user in a file",
			src: lines(
				`[[listen]]`,
				`address = "127.0.0.1:1"`,
				`"-" = { name = "alice", password = "a" }`,
				`URLUser = { name = "alice", password = "a" }`,
			),
			want: []string{"rustle.toml:3: unknown key listen[0].-", "rustle.toml:4: unknown key listen[0].URLUser"},
		},
		{
			// users and groups are keys of the embedded Criteria's Who;
			// the embedded structs are no keys of their own.
			name: "keys of embedded structs",
			src: lines(
				`[[acl.rules]]`,
				`action = "allow"`,
				`usres = ["alice"]`,
				`Criteria = { hosts = ["a.example"] }`,
				`[[egress.rules]]`,
				`who = { users = ["bob"] }`,
				`users = ["bob"]`,
			),
			want: []string{
				"rustle.toml:3: unknown key acl.rules.usres",
				"rustle.toml:4: unknown key acl.rules.Criteria",
				"rustle.toml:6: unknown key egress.rules.who",
			},
		},
		{
			name: "unknown table reported once",
			src:  lines(`[tls]`, `cert = "a"`, `key = "b"`),
			want: []string{"rustle.toml:1: unknown key tls"},
		},
		{
			name: "inline table",
			src:  lines(`log = { level = "info", colour = true, size = 3 }`),
			want: []string{"rustle.toml:1: unknown key log.colour", "rustle.toml:1: unknown key log.size"},
		},
		{
			name: "array of inline tables",
			src: lines(
				`listen = [`,
				`  { address = "127.0.0.1:1" },`,
				`  # a comment with { braces ] and "quotes`,
				`  { address = "127.0.0.1:2", "pro tocol" = "http" },`,
				`]`,
			),
			want: []string{`rustle.toml:4: unknown key listen[1]."pro tocol"`},
		},
		{
			name: "lines counted through multi-line strings",
			src: lines(
				`[auth]`,
				`realm = '''`,
				`a [b] c = d`,
				`'''`,
				`htpasswd = ["""x`,
				`y\"""", 'z']`,
				`relm = "x"`,
			),
			want: []string{"rustle.toml:7: unknown key auth.relm"},
		},
		{
			name: "several, in line order",
			src: lines(
				`[upstream]`,
				`max_idle = 1`,
				`idle = "1s"`,
				`[log]`,
				`lvl = "info"`,
				`[[listen]]`,
				`adress = "x"`,
			),
			want: []string{
				"rustle.toml:3: unknown key upstream.idle",
				"rustle.toml:5: unknown key log.lvl",
				"rustle.toml:7: unknown key listen[0].adress",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.src), "rustle.toml")
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			if diff := cmp.Diff(tt.want, errorStrings(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			if !errors.Is(err, ErrUnknownKey) {
				t.Errorf("errors.Is(err, ErrUnknownKey) = false for %v", err)
			}
		})
	}
}

func TestParseBadValues(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "string for integer",
			src:  lines(`workers = "4"`),
			want: []string{"rustle.toml:1: workers: want an integer, not a string"},
		},
		{
			name: "float for integer",
			src:  lines(`[upstream]`, `max_idle = 1.5`),
			want: []string{"rustle.toml:2: upstream.max_idle: want an integer, not a float"},
		},
		{
			name: "bad duration",
			src:  lines(`[timeouts]`, `connect = "10x"`),
			want: []string{`rustle.toml:2: timeouts.connect: invalid duration "10x": want a Go duration such as "10s", "1m30s" or "2h"`},
		},
		{
			name: "duration without unit",
			src:  lines(`[timeouts]`, `drain = "15"`),
			want: []string{`rustle.toml:2: timeouts.drain: invalid duration "15": want a Go duration such as "10s", "1m30s" or "2h"`},
		},
		{
			name: "integer for duration",
			src:  lines(`[auth]`, `cache_ttl = 300`),
			want: []string{"rustle.toml:2: auth.cache_ttl: want a duration string such as \"10s\", not an integer"},
		},
		{
			name: "string for boolean in second listener",
			src: lines(
				`[[listen]]`,
				`address = "127.0.0.1:1"`,
				`allow_open = false`,
				`[[listen]]`,
				`address = "127.0.0.1:2"`,
				`allow_open = "yes"`,
			),
			want: []string{"rustle.toml:6: listen[1].allow_open: want a boolean, not a string"},
		},
		{
			name: "string for proxy_protocol",
			src:  lines(`[[listen]]`, `address = "127.0.0.1:1"`, `proxy_protocol = "v2"`),
			want: []string{"rustle.toml:3: listen[0].proxy_protocol: want a boolean, not a string"},
		},
		{
			name: "string for array",
			src:  lines(`[auth]`, `htpasswd = "/etc/htpasswd"`),
			want: []string{"rustle.toml:2: auth.htpasswd: want an array, not a string"},
		},
		{
			name: "string for boolean in [access_log]",
			src:  lines(`admin = "127.0.0.1:9090"`, `[access_log]`, `enabled = "yes"`),
			want: []string{"rustle.toml:3: access_log.enabled: want a boolean, not a string"},
		},
		{
			name: "integer for admin",
			src:  lines(`admin = 9090`),
			want: []string{"rustle.toml:1: admin: want a string, not an integer"},
		},
		{
			name: "integer in string array",
			src:  lines(`[auth]`, `htpasswd = [`, `  "a",`, `  2,`, `]`),
			want: []string{"rustle.toml:4: auth.htpasswd[1]: want a string, not an integer"},
		},
		{
			name: "integer for table",
			src:  lines(`log = 3`),
			want: []string{"rustle.toml:1: log: want a table, not an integer"},
		},
		{
			name: "table for array of tables",
			src:  lines(`[listen]`, `address = "127.0.0.1:1"`),
			want: []string{"rustle.toml:1: listen: want an array, not a table"},
		},
		{
			name: "datetime for string",
			src:  lines(`forwarded = 1979-05-27T07:32:00Z`),
			want: []string{"rustle.toml:1: forwarded: want a string, not a datetime"},
		},
		{
			name: "user name of wrong type, second user",
			src: lines(
				`[[auth.users]]`, `name = "a"`, `password = "p"`,
				`[[auth.users]]`, `name = 7`, `password = "p"`,
			),
			want: []string{"rustle.toml:5: auth.users[1].name: want a string, not an integer"},
		},
		{
			name: "type error and unknown key together",
			src:  lines(`via = 1`, `[timeouts]`, `idle = "1s"`),
			want: []string{
				"rustle.toml:1: via: want a boolean, not an integer",
				"rustle.toml:3: unknown key timeouts.idle",
			},
		},
		{
			name: "syntax error",
			src:  lines(`workers = 1`, `[log]`, `level = "info`),
			want: []string{"rustle.toml:3: strings cannot contain newlines"},
		},
		// The decoder's line of an error found at a line's end is the
		// next one: the line is the one of the byte it points at.
		{
			name: "table header left open",
			src:  lines(`workers = 1`, `[log`, `level = "info"`),
			want: []string{`rustle.toml:2: expected '.' or ']' to end table name, but got '\n' instead`},
		},
		{
			name: "array of tables header left open",
			src:  lines(`workers = 1`, `[[listen]`, `address = "127.0.0.1:1"`),
			want: []string{`rustle.toml:2: expected end of table array name delimiter ']', but got '\n' instead`},
		},
		{
			name: "key without a value",
			src:  lines(`workers = 1`, `via`, `[log]`),
			want: []string{`rustle.toml:2: expected '.' or '=', but got '\n' instead`},
		},
		{
			name: "duplicate key",
			src:  lines(`workers = 1`, `workers = 2`),
			want: []string{"rustle.toml:2: Key 'workers' has already been defined."},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.src), "rustle.toml")
			if err == nil {
				t.Fatalf("Parse succeeded: %+v", c)
			}
			if diff := cmp.Diff(tt.want, errorStrings(t, err)); diff != "" {
				t.Errorf("errors (-want +got):\n%s", diff)
			}
			var ce *Error
			if !errors.As(err, &ce) || ce.File != "rustle.toml" || ce.Line == 0 {
				t.Errorf("error %v: want a *config.Error with file and line, got %#v", err, ce)
			}
		})
	}
}

func TestParseValues(t *testing.T) {
	src := lines(
		`workers = 4`,
		`forwarded = "x-forwarded-for"`,
		`via = true`,
		`admin = "127.0.0.1:9090"`,
		`[log]`,
		`format = "json"`,
		`[access_log]`,
		`enabled = true`,
		`format = "json"`,
		`path = "logs/access.log"`,
		`[metrics]`,
		`per_user = true`,
		`max_users = 20`,
		`[timeouts]`,
		`connect = "1m30s"`,
		`[upstream]`,
		`max_idle_per_host = -1`,
		`[auth]`,
		`htpasswd = ["rel/htpasswd", "/abs/htpasswd"]`,
		`[[auth.users]]`,
		`name = "alice"`,
		`password = "p:w"`,
		`[[auth.users]]`,
		`name = "bob"`,
		`bcrypt = "$2y$10$abc"`,
		`[[listen]]`,
		`address = "[::1]:3128"`,
		`auth = "basic"`,
		`[[listen]]`,
		`name = "lan"`,
		`address = ":3129"`,
		`allow_open = true`,
		`proxy_protocol = true`,
		`users = ["bob"]`,
	)
	got, err := Parse([]byte(src), "rustle.toml")
	if err != nil {
		t.Fatal(err)
	}
	want := documentedDefaults()
	want.Workers, want.Forwarded, want.Via = 4, "x-forwarded-for", true
	want.Log.Format = "json"
	want.Admin = "127.0.0.1:9090"
	want.AccessLog = AccessLog{Enabled: true, Format: "json", Path: "logs/access.log"} // Parse does not resolve
	want.Metrics = Metrics{PerUser: true, MaxUsers: 20}
	want.Timeouts.Connect.Duration = 90e9
	want.Upstream.MaxIdlePerHost = -1
	want.Auth.Htpasswd = []string{"rel/htpasswd", "/abs/htpasswd"} // Parse does not resolve
	want.Auth.Users = []User{{Name: "alice", Password: "p:w"}, {Name: "bob", Bcrypt: "$2y$10$abc"}}
	want.Listen = []Listener{
		{Name: "http [::1]:3128", Address: "[::1]:3128", Protocol: "http", Auth: "basic"},
		{Name: "lan", Address: ":3129", Protocol: "http", AllowOpen: true, ProxyProtocol: true, Users: []string{"bob"}},
	}
	if diff := cmp.Diff(&want, got, ignoreLocation); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rustle.toml")
	src := lines(`[auth]`, `htpasswd = ["users", "sub/more", "/abs/htpasswd"]`, `[access_log]`, `path = "log/access.log"`)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "users"), filepath.Join(dir, "sub", "more"), "/abs/htpasswd"}
	if diff := cmp.Diff(want, c.Auth.Htpasswd); diff != "" {
		t.Errorf("htpasswd paths (-want +got):\n%s", diff)
	}
	if want := filepath.Join(dir, "log", "access.log"); c.AccessLog.Path != want {
		t.Errorf("access_log.path = %q, want %q", c.AccessLog.Path, want)
	}

	if err := os.WriteFile(path, []byte(lines(`[log]`, `levle = "debug"`)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || err.Error() != path+":2: unknown key log.levle" {
		t.Errorf("Load with an unknown key: %v; want %s:2: unknown key log.levle", err, path)
	}

	big := bytes.Repeat([]byte("# padding\n"), maxFileBytes/10+1)
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(path); err == nil || !strings.Contains(err.Error(), "larger than the 1048576-byte limit") {
		t.Errorf("Load of a %d-byte file: %v; want a size error", len(big), err)
	}

	_, err = Load(filepath.Join(dir, "missing.toml"))
	if !errors.Is(err, fs.ErrNotExist) || !strings.HasPrefix(err.Error(), "config: ") {
		t.Errorf("Load of a missing file: %v; want a config: error wrapping fs.ErrNotExist", err)
	}
}

func TestLocateKeys(t *testing.T) {
	src := lines(
		`a = 1 # x`,                             // 1
		`"b.c" = { d = [1, {e = 2}], f.g = 3 }`, // 2
		`[t . "q\u0041"]`,                       // 3
		`m = """`,                               // 4
		`]]"" [x]`,                              // 5
		`"""`,                                   // 6
		`k = 'v'`,                               // 7
		`[[arr]]`,                               // 8
		`[[arr]]`,                               // 9
		`[[arr.sub]]`,                           // 10
		`z = 0`,                                 // 11
	)
	got := locateKeys([]byte(src))
	p := func(parts ...string) string { return pathString(parts) }
	want := map[string]int{
		p("a"):                           1,
		p("b.c"):                         2,
		p("b.c", "d"):                    2,
		p("b.c", "d", indexElem(0)):      2,
		p("b.c", "d", indexElem(1)):      2,
		p("b.c", "d", indexElem(1), "e"): 2,
		p("b.c", "f"):                    2,
		p("b.c", "f", "g"):               2,
		p("t"):                           3,
		p("t", "qA"):                     3,
		p("t", "qA", "m"):                4,
		p("t", "qA", "k"):                7,
		p("arr"):                         8,
		p("arr", indexElem(0)):           8,
		p("arr", indexElem(1)):           9,
		p("arr", indexElem(1), "sub"):    10,
		p("arr", indexElem(1), "sub", indexElem(0)):      10,
		p("arr", indexElem(1), "sub", indexElem(0), "z"): 11,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("locateKeys (-want +got):\n%s", diff)
	}
}

// FuzzParse feeds arbitrary bytes to Parse, and to Validate when Parse
// accepts them; neither may panic, and error lines must lie in the input.
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile(exampleFile); err == nil {
		f.Add(b)
	}
	f.Add(defaultTOML)
	f.Fuzz(func(t *testing.T, data []byte) {
		located := locateKeys(data) // on any input, accepted or not, it must end
		var raw map[string]any
		if toml.Unmarshal(data, &raw) == nil {
			checkLocated(t, located, raw, nil)
		}
		c, err := Parse(data, "fuzz.toml")
		if err != nil {
			if c != nil {
				t.Fatalf("Parse returned both a config and %v", err)
			}
			n := bytes.Count(data, []byte("\n")) + 1
			for _, e := range unwrapAll(err) {
				var ce *Error
				if errors.As(e, &ce) && (ce.Line < 0 || ce.Line > n) {
					t.Fatalf("error %q: line %d outside the input's %d lines", ce, ce.Line, n)
				}
			}
			return
		}
		_ = c.Validate()
		for _, l := range c.Listen {
			if a := c.EffectiveAuth(l); a == "" {
				t.Fatalf("EffectiveAuth(%+v) is empty", l)
			}
		}
	})
}

// checkLocated checks that locateKeys found a line for every key in the
// decoded document v, at the path the decoder will ask for.
func checkLocated(t *testing.T, located map[string]int, v any, path []string) {
	t.Helper()
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			p := append(path[:len(path):len(path)], k)
			if strings.ContainsAny(k, indexPrefix+"\x01") {
				continue // paths are ambiguous; a wrong line is allowed
			}
			if located[pathString(p)] == 0 {
				t.Fatalf("key %s (path %q) not located", displayKey(p), p)
			}
			checkLocated(t, located, e, p)
		}
	case []map[string]any:
		for i, e := range v {
			checkLocated(t, located, e, append(path[:len(path):len(path)], indexElem(i)))
		}
	case []any:
		for i, e := range v {
			checkLocated(t, located, e, append(path[:len(path):len(path)], indexElem(i)))
		}
	}
}

func unwrapAll(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}
