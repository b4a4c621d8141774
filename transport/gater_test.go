package transport

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

type fakeConnAddrs struct{}

func (fakeConnAddrs) LocalMultiaddr() ma.Multiaddr  { return ma.StringCast("/ip4/127.0.0.1/tcp/1") }
func (fakeConnAddrs) RemoteMultiaddr() ma.Multiaddr { return ma.StringCast("/ip4/127.0.0.1/tcp/2") }

func TestGaterJoinWindowWithClock(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	member, _ := peer.Decode("12D3KooWEN6q6A38mPpJayXsAtW482soKD1tEGHWBhLG3hE9xQCK")
	stranger, _ := peer.Decode("12D3KooWNHjGv7teat4aUKK7QPmcoqWESsRJ328jpMzPKkCP97Q7")
	g.setMember(member, true)
	in := network.DirInbound

	if !g.InterceptSecured(in, member, fakeConnAddrs{}) {
		t.Fatal("member refused")
	}
	if g.InterceptSecured(in, stranger, fakeConnAddrs{}) {
		t.Fatal("stranger admitted without a join window")
	}
	g.openJoin([]byte("tok"), now.Add(time.Minute))
	if !g.InterceptSecured(in, stranger, fakeConnAddrs{}) {
		t.Fatal("stranger refused during the join window")
	}
	if g.isMember(stranger) {
		t.Fatal("a window-admitted peer counts as a member")
	}
	if !g.checkToken([]byte("tok")) || g.checkToken([]byte("tok2")) || g.checkToken(nil) {
		t.Fatal("token check wrong")
	}
	now = now.Add(time.Minute) // the window closes at `until`
	if g.InterceptSecured(in, stranger, fakeConnAddrs{}) || g.checkToken([]byte("tok")) {
		t.Fatal("join window still open after it expired")
	}
	g.openJoin([]byte("tok"), now.Add(time.Hour))
	g.closeJoin()
	if g.checkToken([]byte("tok")) {
		t.Fatal("closed window accepted a token")
	}
	// Blocking wins over membership, both directions.
	g.setBlocked([]peer.ID{member}, true)
	if g.InterceptSecured(in, member, fakeConnAddrs{}) || g.InterceptPeerDial(member) || g.isMember(member) {
		t.Fatal("blocked member admitted")
	}
	g.unblockAll()
	if !g.InterceptSecured(in, member, fakeConnAddrs{}) || !g.InterceptPeerDial(member) {
		t.Fatal("member still refused after unblock")
	}
}
