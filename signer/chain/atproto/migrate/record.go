package migrate

import (
	"fmt"

	"github.com/bluesky-social/indigo/atproto/atdata"

	"github.com/batonhq/baton/signer/chain/atproto"
)

// RecordFromJSON converts a record in atproto's JSON data model ({"$type": ...},
// "$link" for CIDs, "$bytes" for bytes, integers only) to the DAG-CBOR bytes an
// atproto chain stores, through indigo's atdata (the inverse of
// atproto.RecordJSON). The result passes atproto.CheckRecord, the apply's check.
func RecordFromJSON(b []byte) ([]byte, error) {
	obj, err := atdata.UnmarshalJSON(b)
	if err != nil {
		return nil, fmt.Errorf("record JSON: %w", err)
	}
	rec, err := atdata.MarshalCBOR(obj)
	if err != nil {
		return nil, fmt.Errorf("record JSON to DAG-CBOR: %w", err)
	}
	if err := atproto.CheckRecord(rec); err != nil {
		return nil, fmt.Errorf("record JSON to DAG-CBOR: %w", err)
	}
	return rec, nil
}
