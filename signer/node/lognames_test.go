package node

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

type stringer string

func (s stringer) String() string { return string(s) }

// A log line names a member by its name wherever a member key holds its ID, full or
// short, as a string, a Stringer (peer.ID) or a string type (raft.ServerID); other
// keys and unknown IDs are left alone.
func TestLogsNameMembers(t *testing.T) {
	const (
		laptop = "12D3KooWLaptopLaptopLaptopLaptopLaptopLaptopAAAA1111"
		phone  = "12D3KooWPhonePhonePhonePhonePhonePhonePhoneBBBB2222"
		self   = "12D3KooWServerServerServerServerServerServeCCCC3333"
		nobody = "12D3KooWNobodyNobodyNobodyNobodyNobodyNobodDDDD4444"
	)
	ns := &names{m: map[string]string{laptop: "laptop", phone: "phone"}}
	ns.setSelf(self, "server")
	var buf bytes.Buffer
	l := slog.New(namedLogs{h: slog.NewTextHandler(&buf, nil), ns: ns})
	l.With("leader", shortID(phone)).Info("a", "peer", laptop, "holder", self, "server-id", raft.ServerID(phone),
		"from", stringer(laptop), "to", nobody, "node", shortID(self), "chain", laptop)
	got := buf.String()
	for _, want := range []string{
		`leader="phone (` + shortID(phone) + `)"`,
		`peer="laptop (` + shortID(laptop) + `)"`,
		`holder="server (` + shortID(self) + `)"`,
		`server-id="phone (` + shortID(phone) + `)"`,
		`from="laptop (` + shortID(laptop) + `)"`,
		`to=` + nobody,
		`node=` + shortID(self), // not a member key: every line's own device
		`chain=` + laptop,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("log line lacks %s:\n%s", want, got)
		}
	}
}
