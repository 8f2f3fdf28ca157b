package main

import (
	"errors"
	"flag"
	"strconv"

	"github.com/flashgate/flashgate/gateway"
	"github.com/flashgate/flashgate/inventory"
	"github.com/flashgate/flashgate/ordersink"
)

// waitCount is the value of --wait-replicas and --sink-wait-replicas: "auto"
// (ordersink.WaitAuto, the default), "0" (ordersink.WaitOff) or a count.
type waitCount struct{ p *int }

func (w waitCount) String() string {
	if w.p == nil {
		return "auto"
	}
	switch *w.p {
	case ordersink.WaitAuto:
		return "auto"
	case ordersink.WaitOff:
		return "0"
	}
	return strconv.Itoa(*w.p)
}

func (w waitCount) Set(s string) error {
	if s == "auto" {
		*w.p = ordersink.WaitAuto
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return errors.New(`want "auto" or a count of replicas, 0 for none`)
	}
	if n == 0 {
		n = ordersink.WaitOff
	}
	*w.p = n
	return nil
}

// waitFlag binds a waitCount flag, default auto.
func waitFlag(p func(*Config) *int) func(*flag.FlagSet, *Config, string, string) {
	return func(fs *flag.FlagSet, c *Config, n, u string) {
		*p(c) = ordersink.WaitAuto
		fs.Var(waitCount{p(c)}, n, u)
	}
}

// inventoryWait is inventory.Config.WaitReplicas for a waitCount's value.
func inventoryWait(n int) int {
	switch n {
	case ordersink.WaitAuto:
		return inventory.WaitAuto
	case ordersink.WaitOff:
		return inventory.WaitOff
	}
	return n
}

// gatewayWait is gateway.Config.WaitReplicas for a waitCount's value.
func gatewayWait(n int) int {
	switch n {
	case ordersink.WaitAuto:
		return gateway.WaitAuto
	case ordersink.WaitOff:
		return gateway.WaitOff
	}
	return n
}
