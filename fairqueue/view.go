package fairqueue

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/flashgate/flashgate/lua"
)

// Fields are the sale hash fields that hold a fair queue's state (see
// lua/keys.go for each), in the order Read takes them: what the gateway's
// refresh, the leader's step and the admin status read, with one HMGET.
var Fields = []string{
	lua.FieldQueueOpen, lua.FieldQueueStarted, lua.FieldQueueRanked, lua.FieldQueueEpoch,
	lua.FieldQueueSeed, lua.FieldQueueSeedSHA, lua.FieldQueuePrequeued, lua.FieldQueueLate,
	lua.FieldQueueAdmitted, lua.FieldQueueThreshold, lua.FieldQueueExpired, lua.FieldQueueExpiredThreshold,
	lua.FieldQueueRate, lua.FieldQueueMaxNumber,
}

// View is one reading of a fair queue's fields; positions count from 1
// (docs/api.md, "Fair queue").
type View struct {
	// Open is set once the queue takes entries, Started from the sale's
	// start (entries are late ones), Ranked once the leader wrote every
	// pre-start entrant's rank.
	Open, Started, Ranked bool
	// Epoch is what the seed derives from, SeedSHA the seed's SHA-256
	// published at the opening (hex).
	Epoch, SeedSHA string
	// SeedHex and Seed are the seed, revealed at the start: "" and nil
	// before it (or when the hash holds a malformed one).
	SeedHex string
	Seed    []byte
	// Prequeued and Late count the entrants before and after the start.
	Prequeued, Late int64
	// Admitted and Expired are the frontiers: positions admitted, and
	// positions whose admission window ended.
	Admitted, Expired int64
	// Threshold and ExpiredThreshold are the rank keys of the pre-start
	// positions min(Admitted, Prequeued) and min(Expired, Prequeued), when
	// Has… says they are set.
	Threshold, ExpiredThreshold       [RankKeySize]byte
	HasThreshold, HasExpiredThreshold bool
	// Rate is the positions admitted per minute, recently; MaxNumber the
	// proof of work's difficulty now.
	Rate, MaxNumber int64
}

// Read parses an HMGET of Fields; ok is false when vals does not hold
// one value per field.
func Read(vals []any) (v View, ok bool) {
	h, ok := lua.ReadHash(Fields, vals)
	if !ok {
		return View{}, false
	}
	v = View{
		Open:      h.Int(lua.FieldQueueOpen) == 1,
		Started:   h.Int(lua.FieldQueueStarted) == 1,
		Ranked:    h.Int(lua.FieldQueueRanked) == 1,
		Epoch:     h.Str(lua.FieldQueueEpoch),
		SeedHex:   h.Str(lua.FieldQueueSeed),
		SeedSHA:   h.Str(lua.FieldQueueSeedSHA),
		Prequeued: h.Int(lua.FieldQueuePrequeued),
		Late:      h.Int(lua.FieldQueueLate),
		Admitted:  h.Int(lua.FieldQueueAdmitted),
		Expired:   h.Int(lua.FieldQueueExpired),
		Rate:      h.Int(lua.FieldQueueRate),
		MaxNumber: h.Int(lua.FieldQueueMaxNumber),
	}
	v.HasThreshold = readKey(h.Str(lua.FieldQueueThreshold), &v.Threshold)
	v.HasExpiredThreshold = readKey(h.Str(lua.FieldQueueExpiredThreshold), &v.ExpiredThreshold)
	if b, err := hex.DecodeString(v.SeedHex); err == nil && len(b) == sha256.Size && v.Started {
		v.Seed = b
	} else {
		v.SeedHex = ""
	}
	return v, true
}

// Entrants is every entrant so far.
func (v *View) Entrants() int64 { return v.Prequeued + v.Late }

// readKey decodes a hex rank key into out; it reports whether s held one.
func readKey(s string, out *[RankKeySize]byte) bool {
	if len(s) != 2*RankKeySize {
		return false
	}
	_, err := hex.Decode(out[:], []byte(s))
	return err == nil
}
