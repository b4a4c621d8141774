package atproto

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/batonhq/baton/signer/chain"
)

// TestReadCARRecords: the records of a repository's CAR (as getRepo or export --car
// give it) read back in path order with their bytes; put into a new chain with another
// key and DID (a repository moved onto baton), they make the same MST: the same data
// CID, every record at the same path with the same CID. A CAR that is not one is
// refused.
func TestReadCARRecords(t *testing.T) {
	ctx := context.Background()
	src, _ := GenerateKeyOf(KeyTypeK256)
	r := newReplica()
	var ops []chain.Op
	for i := range 40 {
		ops = append(ops, chain.Op{ID: fmt.Sprint(i), Kind: chain.Put, Path: fmt.Sprintf("app.bsky.feed.post/3l3qo2vut%04d", i*7), Value: record(t, fmt.Sprint("post ", i))})
	}
	ops = append(ops, chain.Op{ID: "like", Kind: chain.Put, Path: "app.bsky.feed.like/3l3qo2vut0001", Value: record(t, "like")})
	raw, err := Propose(src, r.bs, r.head, chain.Commit{Seq: 1, Epoch: 1, Signer: "p", Ops: ops}, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "3l3qo2vut2222")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.apply(raw); err != nil {
		t.Fatal(err)
	}
	var car bytes.Buffer
	bl, err := RepoBlocks(r.bs, r.head)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteCAR(&car, r.head.Commit, bl); err != nil {
		t.Fatal(err)
	}
	got, err := ReadCARRecords(ctx, bytes.NewReader(car.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if got.DID != "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa" || got.Rev != "3l3qo2vut2222" || len(got.Records) != len(ops) {
		t.Fatalf("read %s %s, %d records", got.DID, got.Rev, len(got.Records))
	}
	for i := 1; i < len(got.Records); i++ {
		if got.Records[i-1].Path >= got.Records[i].Path {
			t.Fatalf("records not in path order at %d", i)
		}
	}
	dst, _ := GenerateKeyOf(KeyTypeP256)
	moved := newReplica()
	var puts []chain.Op
	for i, rec := range got.Records {
		puts = append(puts, chain.Op{ID: fmt.Sprint("m", i), Kind: chain.Put, Path: rec.Path, Value: rec.Value})
	}
	raw, err = Propose(dst, moved.bs, moved.head, chain.Commit{Seq: 1, Epoch: 1, Signer: "q", Ops: puts}, testDID, "3l3qo2vut3333")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := moved.apply(raw); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(moved.head.Data, r.head.Data) {
		t.Fatal("the moved repository's MST root differs from the original's")
	}
	for _, op := range ops {
		rec, c, err := GetRecord(moved.bs, moved.head, op.Path)
		if err != nil || !bytes.Equal(rec, op.Value) || !bytes.Equal(c, CIDOf(op.Value)) {
			t.Fatalf("%s after the move: %v", op.Path, err)
		}
	}
	if _, err := ReadCARRecords(ctx, bytes.NewReader(car.Bytes()[:car.Len()/2])); err == nil {
		t.Fatal("half a CAR read")
	}
}
