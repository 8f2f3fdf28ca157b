package main

import (
	"flag"
	"time"
)

// cmdSet is a set of commands, one bit each: the commands that take a flag
// or that a check applies to.
type cmdSet uint16

// The commands that parse flags; a new command adds a bit here and its
// name to cmdNames.
const (
	cmdServe cmdSet = 1 << iota
	cmdGateway
	cmdInventory
	cmdOrdersink
	cmdControlplane
	cmdDemo
	cmdCrowd
	cmdToken
	cmdVersion
)

// cmdNames maps each command's name to its bit.
var cmdNames = map[string]cmdSet{
	"serve":        cmdServe,
	"gateway":      cmdGateway,
	"inventory":    cmdInventory,
	"ordersink":    cmdOrdersink,
	"controlplane": cmdControlplane,
	"demo":         cmdDemo,
	"crowd":        cmdCrowd,
	"token":        cmdToken,
	"version":      cmdVersion,
}

// has reports whether the command named cmd is in s.
func (s cmdSet) has(cmd string) bool { return s&cmdNames[cmd] != 0 }

// flagSpec ties a flag to the commands that take it.
type flagSpec struct {
	name, usage string
	cmds        cmdSet
	bind        func(fs *flag.FlagSet, c *Config, name, usage string)
}

func strFlag(p func(*Config) *string, def string) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) { fs.StringVar(p(c), n, def, u) }
}

func durFlag(p func(*Config) *time.Duration, def time.Duration) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) { fs.DurationVar(p(c), n, def, u) }
}

func floatFlag(p func(*Config) *float64, def float64) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) { fs.Float64Var(p(c), n, def, u) }
}

func intFlag(p func(*Config) *int, def int) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) { fs.IntVar(p(c), n, def, u) }
}

func int64Flag(p func(*Config) *int64, def int64) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) { fs.Int64Var(p(c), n, def, u) }
}

func boolFlag(p func(*Config) *bool, def bool) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) { fs.BoolVar(p(c), n, def, u) }
}

// Command sets several flags share.
const (
	servers = cmdServe | cmdGateway | cmdInventory | cmdOrdersink | cmdControlplane
	gwLike  = cmdServe | cmdGateway | cmdDemo
	cpLike  = cmdServe | cmdControlplane | cmdDemo
	payCmds = cmdServe | cmdGateway | cmdControlplane | cmdDemo
)
