package main

import (
	"runtime/debug"
	"testing"
)

func TestBuildVersion(t *testing.T) {
	rev := "19ff4046d1f06f8ece6c781713c7a5c33cfd8841"
	for _, tt := range []struct {
		name string
		bi   debug.BuildInfo
		want string
	}{
		{"go install at a tag", debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "v1.2.3"},
		{"git checkout, pseudo-version", debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261201121700-19ff4046d1f0"}},
			"v0.0.0-20261201121700-19ff4046d1f0"},
		{"devel with a revision", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "false"}}}, "dev-19ff4046d1f0"},
		{"devel, modified tree", debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: "true"}}}, "dev-19ff4046d1f0-dirty"},
		{"nothing known", debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := buildVersion(&tt.bi); got != tt.want {
				t.Errorf("buildVersion = %q, want %q", got, tt.want)
			}
		})
	}
}
