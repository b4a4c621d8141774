package transport

import "github.com/libp2p/go-libp2p/core/peer"

// KnownMembers reads the member address book (members.json) of a stopped device's
// data dir: the other members it knows. baton repair uses it to refuse when no other
// member could hold the history.
func KnownMembers(dir string) ([]peer.ID, error) {
	b, err := loadAddrBook(dir)
	if err != nil {
		return nil, err
	}
	var out []peer.ID
	for p := range b.all() {
		out = append(out, p)
	}
	return out, nil
}
