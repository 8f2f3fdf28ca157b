// Package buildinfo tells which flashgate this is: its version, the commit
// it was built from and the Go version that built it, for `flashgate
// version`, the flashgate_build_info metric and /healthz.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// version is set at link time by `make build`:
//
//	-ldflags "-X github.com/flashgate/flashgate/internal/buildinfo.version=$(git describe)"
//
// When it is empty, Get falls back to the module version Go recorded.
// commit is set the same way (git rev-parse HEAD), for builds where Go
// records no VCS information (-buildvcs=false).
var version, commit string

// Header is the response header every tier's /healthz carries the version
// in.
const Header = "X-Flashgate-Version"

// Info is what a binary knows about its own build.
type Info struct {
	// Version is the release (git describe, or the module version); "devel"
	// when neither is known.
	Version string `json:"version"`
	// Commit is the VCS revision, with "-dirty" when the tree had changes;
	// "unknown" when Go recorded none (go test, go run without VCS).
	Commit string `json:"commit"`
	// GoVersion is the Go toolchain that built the binary.
	GoVersion string `json:"goversion"`
}

var (
	once sync.Once
	info Info
)

// Get returns this binary's build information, read once.
func Get() Info {
	once.Do(func() {
		info = read(version, debug.ReadBuildInfo)
		if commit != "" && info.Commit == "unknown" {
			info.Commit = commit
		}
	})
	return info
}

// read builds an Info from the link-time version and what
// debug.ReadBuildInfo reports.
func read(linked string, readBuild func() (*debug.BuildInfo, bool)) Info {
	i := Info{Version: linked, Commit: "unknown", GoVersion: runtime.Version()}
	bi, ok := readBuild()
	if !ok {
		if i.Version == "" {
			i.Version = "devel"
		}
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if i.Version == "" {
		i.Version = bi.Main.Version
	}
	if i.Version == "" || i.Version == "(devel)" {
		i.Version = "devel"
	}
	var dirty bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Commit = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if dirty && i.Commit != "unknown" {
		i.Commit += "-dirty"
	}
	return i
}

// Collector returns a new flashgate_build_info gauge, always 1, labelled
// with version, commit and goversion.
func Collector() prometheus.Collector {
	i := Get()
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "flashgate_build_info",
		Help:        "Always 1; the labels tell the version, commit and Go version of the running binary.",
		ConstLabels: prometheus.Labels{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion},
	}, func() float64 { return 1 })
}

// Register registers Collector with reg, unless reg already has one (two
// tiers in one process share one registry); it never fails.
func Register(reg prometheus.Registerer) {
	if reg == nil {
		return
	}
	_ = reg.Register(Collector())
}
