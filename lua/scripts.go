package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed reserve.lua
	reserveSrc string
	//go:embed release.lua
	releaseSrc string
	//go:embed prepare.lua
	prepareSrc string
	//go:embed setstate.lua
	setStateSrc string
	//go:embed resync.lua
	resyncSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed unlock.lua
	unlockSrc string
)

// The scripts, each wrapped once; see the header of each .lua file for its
// KEYS, ARGV and return values.
var (
	Reserve  = redis.NewScript(reserveSrc)
	Release  = redis.NewScript(releaseSrc)
	Prepare  = redis.NewScript(prepareSrc)
	SetState = redis.NewScript(setStateSrc)
	Resync   = redis.NewScript(resyncSrc)
	Extend   = redis.NewScript(extendSrc)
	Unlock   = redis.NewScript(unlockSrc)
)

// Return codes of Reserve.
const (
	ReserveOK          = 0
	ReserveNoSale      = 1
	ReserveNotStarted  = 2
	ReserveClosed      = 3
	ReserveSoldOut     = 4
	ReservePurchased   = 5
	ReserveBadQuantity = 6
)

// Return codes of Release.
const (
	ReleaseDone    = 1
	ReleaseAlready = 0
	ReleaseNoSale  = -1
)
