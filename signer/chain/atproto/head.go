package atproto

import (
	"bytes"
	"fmt"
)

type headWire struct {
	DID    string `cbor:"did"`
	Data   []byte `cbor:"data"`
	Rev    string `cbor:"rev"`
	Commit []byte `cbor:"commit"`
}

// EncodeHead returns the stored form of a repository head (canonical CBOR).
func EncodeHead(h Head) ([]byte, error) {
	return encMode.Marshal(headWire{DID: h.DID, Data: h.Data, Rev: h.Rev, Commit: h.Commit})
}

// DecodeHead reads EncodeHead's bytes; nil is the empty repository's head.
func DecodeHead(b []byte) (Head, error) {
	if b == nil {
		return Head{}, nil
	}
	var w headWire
	if err := envDecMode.Unmarshal(b, &w); err != nil {
		return Head{}, fmt.Errorf("repository head: %v", err)
	}
	h := Head{DID: w.DID, Data: w.Data, Rev: w.Rev, Commit: w.Commit}
	if re, err := EncodeHead(h); err != nil || !bytes.Equal(re, b) {
		return Head{}, fmt.Errorf("repository head is not canonical")
	}
	return h, nil
}
