// Command flashgate runs the flash-sale system: all tiers in one process
// (serve), one tier alone (gateway, inventory, ordersink, controlplane), the
// zero set-up demo, a load generator (crowd), a token minter (token), a
// draw's verification (draw verify) and its own build information
// (version).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	if err != nil {
		var ue *usageError
		if !errors.As(err, &ue) || ue.msg != "" {
			fmt.Fprintln(os.Stderr, "flashgate: "+oneLine(err.Error()))
		}
		os.Exit(exitCode(err))
	}
}

// commands maps each command to its runner and a one-line summary.
var commands = []struct {
	name, summary string
	run           func(ctx context.Context, cfg *Config, stdout, stderr io.Writer) error
}{
	{"demo", "zero set-up demo: embedded store and SQLite, a sale, a crowd, a report", runDemo},
	{"serve", "all tiers in one process against real Redis and a database", runServe},
	{"gateway", "the public HTTP edge alone", runGateway},
	{"inventory", "the reserve tier alone (HTTP face for gateways)", runInventory},
	{"ordersink", "the order sink alone (Redis streams → database)", runOrdersink},
	{"controlplane", "the admin API and lifecycle loops alone", runControlplane},
	{"crowd", "load generator: N distinct buyers against a running gateway", runCrowd},
	{"token", "print a buyer token for --user", runToken},
	{"version", "print the version, commit and Go version of this binary", runVersion},
}

// run parses args and runs one command; it returns instead of exiting, so
// tests can call it.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return &usageError{"a command is required (see flashgate help)"}
		}
		return nil
	}
	if args[0] == "draw" { // positional arguments, no flags: not in commands
		return runDraw(args[1:], stdout, stderr)
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		cfg, err := parseConfig(c.name, args[1:], stderr, getenv)
		if err != nil {
			return err
		}
		if cfg == nil { // -h
			return nil
		}
		return c.run(ctx, cfg, stdout, stderr)
	}
	return &usageError{fmt.Sprintf("unknown command %q (see flashgate help)", args[0])}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: flashgate <command> [flags]   (every flag also reads FLASHGATE_<FLAG>)")
	fmt.Fprintln(w)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-13s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, "  %-13s %s\n", "draw", "verify a draw's entries file: flashgate draw verify FILE")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "flashgate <command> -h lists a command's flags.")
}

// usageError is a mistake in the command line: exit code 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var ue *usageError
	if errors.As(err, &ue) {
		return 2
	}
	return 1
}

// oneLine keeps an error to the single line the contract promises.
func oneLine(s string) string {
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' || s[i] == '\r' {
			return s[:i]
		}
	}
	return s
}
