package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"

	"github.com/flashgate/flashgate/internal/buildinfo"
)

func TestVersionCommand(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(context.Background(), []string{"version"}, &out, &errb, env(nil)); err != nil {
		t.Fatalf("flashgate version: %v", err)
	}
	i := buildinfo.Get()
	want := "flashgate " + i.Version + "\ncommit    " + i.Commit + "\ngo        " + runtime.Version() + "\n"
	if out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
	if err := run(context.Background(), []string{"version", "extra"}, &out, &errb, env(nil)); err == nil || exitCode(err) != 2 {
		t.Errorf("flashgate version extra: got %v, want a usage error", err)
	}
}

// TestMetricsMuxBuildInfo checks what every tier without an admin API serves:
// flashgate_build_info on /metrics and the version on /healthz.
func TestMetricsMuxBuildInfo(t *testing.T) {
	st := newStack(&Config{}, io.Discard)
	srv := httptest.NewServer(st.metricsMux(func(context.Context) error { return nil }))
	t.Cleanup(srv.Close)
	v := buildinfo.Get().Version

	res, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(body), `flashgate_build_info{commit="`) || !strings.Contains(string(body), `version="`+v+`"} 1`) {
		t.Errorf("/metrics: no flashgate_build_info with version %q in:\n%.2000s", v, body)
	}

	res, err = http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var h map[string]string
	err = json.NewDecoder(res.Body).Decode(&h)
	res.Body.Close()
	if err != nil || res.StatusCode != 200 || h["status"] != "ok" || h["version"] != v || res.Header.Get(buildinfo.Header) != v {
		t.Errorf("/healthz: got %d %v %v (header %q), want 200 status ok, version %q", res.StatusCode, h, err, res.Header.Get(buildinfo.Header), v)
	}
}
