package migrate

import (
	"errors"
	"strings"
	"testing"

	"github.com/batonhq/baton/signer/chain/atproto"
)

const testDID = "did:plc:ewvi7nxzyoun6zhxrhs64oiz"

// TestCheckDIDDocument: a did:plc document (the PLC directory's shape) whose #atproto
// key is the chain key passes; one of another DID, with another #atproto key, without
// one, or that is not JSON is refused with ErrDIDDocument.
func TestCheckDIDDocument(t *testing.T) {
	k, _ := atproto.GenerateKeyOf(atproto.KeyTypeK256)
	other, _ := atproto.GenerateKeyOf(atproto.KeyTypeP256)
	doc := func(id, vmID, key string) []byte {
		return []byte(`{"@context":["https://www.w3.org/ns/did/v1"],"id":"` + id + `","alsoKnownAs":["at://example.com"],
"verificationMethod":[{"id":"` + id + vmID + `","type":"Multikey","controller":"` + id + `","publicKeyMultibase":"` + strings.TrimPrefix(key, "did:key:") + `"}],
"service":[{"id":"#atproto_pds","type":"AtprotoPersonalDataServer","serviceEndpoint":"https://pds.example.com"}]}`)
	}
	if err := CheckDIDDocument(doc(testDID, "#atproto", k.DID()), testDID, k.DID()); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string][]byte{
		"another DID's":     doc("did:plc:aaaaaaaaaaaaaaaaaaaaaaaa", "#atproto", k.DID()),
		"another key":       doc(testDID, "#atproto", other.DID()),
		"no #atproto key":   doc(testDID, "#other", k.DID()),
		"not JSON":          []byte("did:plc:" + testDID),
		"an empty document": []byte("{}"),
	} {
		if err := CheckDIDDocument(b, testDID, k.DID()); !errors.Is(err, ErrDIDDocument) {
			t.Errorf("%s: %v", name, err)
		}
	}
}
