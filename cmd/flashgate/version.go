package main

import (
	"context"
	"fmt"
	"io"

	"github.com/flashgate/flashgate/internal/buildinfo"
)

// runVersion prints the version, commit and Go version of this binary.
func runVersion(_ context.Context, _ *Config, stdout, _ io.Writer) error {
	i := buildinfo.Get()
	_, err := fmt.Fprintf(stdout, "flashgate %s\ncommit    %s\ngo        %s\n", i.Version, i.Commit, i.GoVersion)
	return err
}
