package migrate

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// post is a DAG-CBOR app.bsky.feed.post record {text, $type} (text under 24 bytes).
func post(text string) []byte {
	b := []byte{0xa2, 0x64}
	b = append(b, "text"...)
	b = append(b, byte(0x60+len(text)))
	b = append(b, text...)
	b = append(b, 0x65)
	b = append(b, "$type"...)
	b = append(b, 0x72)
	return append(b, "app.bsky.feed.post"...)
}

// repoOf builds a one-commit repository of ops with key k and DID did and returns its
// blocks and head.
func repoOf(t *testing.T, k *atproto.Key, did string, ops []chain.Op) (atproto.MemBlocks, atproto.Head) {
	t.Helper()
	bs := atproto.MemBlocks{}
	raw, err := atproto.Propose(k, bs, atproto.Head{}, chain.Commit{Seq: 1, Epoch: 1, Signer: "p", Ops: ops}, did, "3l3qo2vut2222")
	if err != nil {
		t.Fatal(err)
	}
	e, err := atproto.VerifyEnvelope(raw)
	if err != nil {
		t.Fatal(err)
	}
	st, err := atproto.Apply(bs, atproto.Head{}, e)
	if err != nil {
		t.Fatal(err)
	}
	bs.Put(st.Blocks)
	return bs, st.Head
}

// TestReadCARRecords: the records of a repository's CAR (as getRepo or export --car
// give it) read back in path order with their bytes; put into a new chain with another
// key and DID (a repository moved onto baton), they make the same MST: the same data
// CID, every record at the same path with the same CID. A CAR cut short is refused.
func TestReadCARRecords(t *testing.T) {
	ctx := context.Background()
	src, _ := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	var ops []chain.Op
	for i := range 40 {
		ops = append(ops, chain.Op{ID: fmt.Sprint(i), Kind: chain.Put, Path: fmt.Sprintf("app.bsky.feed.post/3l3qo2vut%04d", i*7), Value: post(fmt.Sprint("post ", i))})
	}
	ops = append(ops, chain.Op{ID: "like", Kind: chain.Put, Path: "app.bsky.feed.like/3l3qo2vut0001", Value: post("like")})
	bs, head := repoOf(t, src, "did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", ops)
	var car bytes.Buffer
	bl, err := atproto.RepoBlocks(bs, head)
	if err != nil {
		t.Fatal(err)
	}
	if err := atproto.WriteCAR(&car, head.Commit, bl); err != nil {
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
	dst, _ := atproto.GenerateKeyOf(atproto.KeyTypeP256)
	var puts []chain.Op
	for i, rec := range got.Records {
		puts = append(puts, chain.Op{ID: fmt.Sprint("m", i), Kind: chain.Put, Path: rec.Path, Value: rec.Value})
	}
	mbs, mhead := repoOf(t, dst, testDID, puts)
	if !bytes.Equal(mhead.Data, head.Data) {
		t.Fatal("the moved repository's MST root differs from the original's")
	}
	for _, op := range ops {
		rec, c, err := atproto.GetRecord(mbs, mhead, op.Path)
		if err != nil || !bytes.Equal(rec, op.Value) || !bytes.Equal(c, atproto.CIDOf(op.Value)) {
			t.Fatalf("%s after the move: %v", op.Path, err)
		}
	}
	if _, err := ReadCARRecords(ctx, bytes.NewReader(car.Bytes()[:car.Len()/2])); err == nil {
		t.Fatal("half a CAR read")
	}
}
