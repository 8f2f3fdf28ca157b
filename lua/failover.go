package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

//go:embed pause.lua
var pauseSrc string

// Pause is lua/pause.lua: it stops an open sale from selling while the
// control plane rebuilds it after a failover.
var Pause = redis.NewScript(pauseSrc)
