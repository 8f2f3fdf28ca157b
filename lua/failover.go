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

//go:embed rebuilt.lua
var rebuiltSrc string

// Rebuilt is lua/rebuilt.lua: after a failover's rebuild it names the new
// primary in the marker and marks an open sale to reopen, in one step.
var Rebuilt = redis.NewScript(rebuiltSrc)

// Answers of Rebuilt.
const (
	RebuiltDone   = 1
	RebuiltNoSale = 0
	RebuiltFenced = -1
)

//go:embed ledgerrepair.lua
var ledgerRepairSrc string

// LedgerRepair is lua/ledgerrepair.lua: it moves a bucketed sale's ledger
// past the moves its buckets carry, after the ledger's primary failed over.
var LedgerRepair = redis.NewScript(ledgerRepairSrc)
