package atproto

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"math/big"
	"reflect"

	"github.com/fxamacker/cbor/v2"
)

// DAG-CBOR is RFC 8949 core deterministic encoding (fxamacker's CoreDetEncOptions:
// shortest integers and lengths, map keys sorted length first then bytewise) with
// three further rules this file enforces: no floats, no nil lists or maps (encoded
// [] and {}, never null, by our own types), and no tags but 42 (a CID link).

var typeMapStringAny = reflect.TypeOf(map[string]any(nil))

var (
	encMode cbor.EncMode
	decMode cbor.DecMode
)

func init() {
	var err error
	encMode, err = cbor.CoreDetEncOptions().EncMode()
	if err != nil {
		panic("atproto: cbor enc mode: " + err.Error())
	}
	decMode, err = cbor.DecOptions{
		DupMapKey:        cbor.DupMapKeyEnforcedAPF,
		TagsMd:           cbor.TagsAllowed,
		DefaultMapType:   typeMapStringAny,
		MaxNestedLevels:  32,
		MaxArrayElements: 1 << 16,
		MaxMapPairs:      1 << 16,
		BigIntDec:        cbor.BigIntDecodePointer,
	}.DecMode()
	if err != nil {
		panic("atproto: cbor dec mode: " + err.Error())
	}
}

// CID prefix of a CIDv1, dag-cbor (0x71), sha2-256 (0x12, 32 bytes).
var cidPrefix = []byte{0x01, 0x71, 0x12, 0x20}

// CIDSize is the size of the CIDs this package makes.
const CIDSize = 36

// CIDOf returns the CID of a DAG-CBOR block.
func CIDOf(block []byte) []byte {
	h := sha256.Sum256(block)
	return append(append(make([]byte, 0, CIDSize), cidPrefix...), h[:]...)
}

// link is a CID in DAG-CBOR: tag 42 around a byte string 0x00 then the CID's bytes.
type link []byte

func (l link) MarshalCBOR() ([]byte, error) {
	return encMode.Marshal(cbor.Tag{Number: 42, Content: append([]byte{0}, l...)})
}

// parseLink reads tag 42 into the CID's bytes.
func parseLink(raw cbor.RawMessage) ([]byte, error) {
	var t cbor.Tag
	if err := decMode.Unmarshal(raw, &t); err != nil {
		return nil, fmt.Errorf("not a CID link: %v", err)
	}
	return linkContent(t)
}

func linkContent(t cbor.Tag) ([]byte, error) {
	b, ok := t.Content.([]byte)
	if t.Number != 42 || !ok || len(b) < 2 || b[0] != 0 {
		return nil, fmt.Errorf("not a CID link (tag %d)", t.Number)
	}
	return b[1:], nil
}

// CheckRecord checks that b is one DAG-CBOR record: a map with string keys, in
// canonical form (it re-encodes to the same bytes), without floats, undefined, big
// numbers or tags other than 42. A record is what a put op's value must be.
func CheckRecord(b []byte) error {
	var v any
	if err := decMode.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("record is not one DAG-CBOR value: %v", err)
	}
	if _, ok := v.(map[string]any); !ok {
		return fmt.Errorf("record is not a map")
	}
	if err := checkValue(v, 0); err != nil {
		return fmt.Errorf("record: %v", err)
	}
	re, err := encMode.Marshal(v)
	if err != nil {
		return fmt.Errorf("record: %v", err)
	}
	if !bytes.Equal(re, b) {
		return fmt.Errorf("record is not in canonical DAG-CBOR form")
	}
	return nil
}

func checkValue(v any, depth int) error {
	switch x := v.(type) {
	case nil, bool, string, []byte, uint64, int64:
		return nil
	case float32, float64:
		return fmt.Errorf("floats are not DAG-CBOR data")
	case *big.Int, big.Int:
		return fmt.Errorf("integer out of 64-bit range")
	case cbor.Tag:
		if _, err := linkContent(x); err != nil {
			return err
		}
		return nil
	case []any:
		for _, e := range x {
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	case map[string]any:
		for _, e := range x { // order does not matter: every value is checked
			if err := checkValue(e, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("value of type %T is not DAG-CBOR data", v)
}
