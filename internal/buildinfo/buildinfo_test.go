package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestRead(t *testing.T) {
	build := func(main string, settings ...string) func() (*debug.BuildInfo, bool) {
		return func() (*debug.BuildInfo, bool) {
			bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Version: main}}
			for i := 0; i+1 < len(settings); i += 2 {
				bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
			}
			return bi, true
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	for _, tc := range []struct {
		name   string
		linked string
		read   func() (*debug.BuildInfo, bool)
		want   Info
	}{
		{"linked version wins", "v1.2.3-4-gabc", build("v1.0.0", "vcs.revision", "abc123"),
			Info{"v1.2.3-4-gabc", "abc123", "go1.99.1"}},
		{"module version", "", build("v1.0.0"), Info{"v1.0.0", "unknown", "go1.99.1"}},
		{"devel, dirty tree", "", build("(devel)", "vcs.revision", "abc123", "vcs.modified", "true"),
			Info{"devel", "abc123-dirty", "go1.99.1"}},
		{"no build info", "", none, Info{"devel", "unknown", runtime.Version()}},
	} {
		if got := read(tc.linked, tc.read); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCollector(t *testing.T) {
	reg := prometheus.NewRegistry()
	Register(reg)
	Register(reg) // a second tier in the same process
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetName() != "flashgate_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("got %v, want one flashgate_build_info series", mfs)
	}
	m := mfs[0].GetMetric()[0]
	got := map[string]string{}
	for _, l := range m.GetLabel() {
		got[l.GetName()] = l.GetValue()
	}
	i := Get()
	want := map[string]string{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion}
	if fmt.Sprint(got) != fmt.Sprint(want) || m.GetGauge().GetValue() != 1 {
		t.Errorf("got labels %v = %v, want %v = 1", got, m.GetGauge().GetValue(), want)
	}
	if i.GoVersion != runtime.Version() {
		t.Errorf("got goversion %q, want %q", i.GoVersion, runtime.Version())
	}
}
