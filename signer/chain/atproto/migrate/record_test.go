package migrate

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/chain/atproto"
)

// A record in atproto's JSON converts to DAG-CBOR the apply accepts, and back
// (atproto.RecordJSON) to the same JSON data: strings, integers, booleans, null,
// nested maps and lists, a $link and $bytes. What the data model refuses is an error:
// floats, a top-level list, not JSON.
func TestRecordFromJSON(t *testing.T) {
	in := `{"$type":"app.bsky.feed.post","text":"hi ✓","createdAt":"2026-12-02T17:00:00.000Z","langs":["en"],` +
		`"n":42,"neg":-7,"ok":true,"none":null,"embed":{"ref":{"$link":"bafyreie5737gdxlw5i64vzichcalba3z2v5n6icifvx5xytvske7mr3hpm"}},` +
		`"raw":{"$bytes":"AAEC"}}`
	rec, err := RecordFromJSON([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if err := atproto.CheckRecord(rec); err != nil {
		t.Fatalf("the apply's check refuses it: %v", err)
	}
	back, err := atproto.RecordJSON(rec)
	if err != nil {
		t.Fatal(err)
	}
	var a, b any
	if err := json.Unmarshal([]byte(in), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(back, &b); err != nil {
		t.Fatal(err)
	}
	aj, _ := json.Marshal(a)
	bj, _ := json.Marshal(b)
	if !bytes.Equal(aj, bj) {
		t.Fatalf("round trip:\n in  %s\n out %s", aj, bj)
	}
	for _, bad := range []string{`{"x":1.5}`, `[1,2]`, `not json`, `{"$link":"nope"}`, `{"x":{"$bytes":"%%"}}`} {
		if _, err := RecordFromJSON([]byte(bad)); err == nil || !strings.Contains(err.Error(), "record JSON") {
			t.Errorf("%s: %v, want an error", bad, err)
		}
	}
}
