package server

import (
	"crypto/sha256"
	"encoding/hex"
)

// maxKeyBytes bounds a client-chosen key (the body's user, the x-session-id header) as the
// replica policies keep it: their tables are bounded in entries, and this bounds each entry,
// so a client cannot grow the gateway's memory by sending long keys.
const maxKeyBytes = 128

// routingKey returns s, or for a longer s a fixed-size digest of it ("sha256:" and 32 hex
// digits): the same long key always maps to the same short one, so affinity and fairness
// still see one session or user, in bounded memory.
func routingKey(s string) string {
	if len(s) <= maxKeyBytes {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:16])
}
