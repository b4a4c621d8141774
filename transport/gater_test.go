package transport

import (
	"io"
	"log/slog"
	"strings"
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
	g.openJoin([]byte("tok"), now.Add(time.Minute), 1)
	if !g.InterceptSecured(in, stranger, fakeConnAddrs{}) {
		t.Fatal("stranger refused during the join window")
	}
	if g.isMember(stranger) {
		t.Fatal("a window-admitted peer counts as a member")
	}
	if !g.checkToken([]byte("tok"), stranger) || g.checkToken([]byte("tok2"), stranger) || g.checkToken(nil, stranger) {
		t.Fatal("token check wrong")
	}
	now = now.Add(time.Minute) // the window closes at `until`
	if g.InterceptSecured(in, stranger, fakeConnAddrs{}) || g.checkToken([]byte("tok"), stranger) {
		t.Fatal("join window still open after it expired")
	}
	g.openJoin([]byte("tok"), now.Add(time.Hour), 1)
	g.closeJoin()
	if g.checkToken([]byte("tok"), stranger) {
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

// A window admits as many devices as it has uses: a join in progress holds a use, a
// success spends it, a failure returns it; the device that joined may repeat its join.
func TestGaterInviteUses(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	x, _ := peer.Decode("12D3KooWEN6q6A38mPpJayXsAtW482soKD1tEGHWBhLG3hE9xQCK")
	y, _ := peer.Decode("12D3KooWNHjGv7teat4aUKK7QPmcoqWESsRJ328jpMzPKkCP97Q7")
	tok := []byte("tok")
	g.openJoin(tok, now.Add(time.Minute), 1)

	gen, ok := g.claimJoin(tok, x)
	if !ok {
		t.Fatal("first claim refused")
	}
	if g.checkToken(tok, y) {
		t.Fatal("a second device got in while the only use was held")
	}
	if _, ok := g.claimJoin(tok, x); !ok { // x retries while its first attempt runs
		t.Fatal("the claimant's retry refused")
	}
	g.endJoin(gen, x, false) // one attempt failed: the use is still held by the other
	if g.checkToken(tok, y) {
		t.Fatal("use released while x still has a join in progress")
	}
	g.endJoin(gen, x, false)
	if !g.checkToken(tok, y) {
		t.Fatal("a failed join did not give its use back")
	}
	gen, _ = g.claimJoin(tok, x)
	g.endJoin(gen, x, true)
	if g.checkToken(tok, y) {
		t.Fatal("a spent invite admitted another device")
	}
	if _, ok := g.claimJoin(tok, y); ok {
		t.Fatal("a spent invite granted a claim")
	}
	if !g.checkToken(tok, x) {
		t.Fatal("the device that joined cannot repeat its join")
	}
	if !g.joinOpen() {
		t.Fatal("the gater stops admitting before the window expires (a replay would get ErrRefused, not ErrBadToken)")
	}

	// A window replaced while a join runs is not spent by it.
	g.openJoin(tok, now.Add(time.Minute), 2)
	gen, _ = g.claimJoin(tok, x)
	g.openJoin(tok, now.Add(time.Minute), 1)
	g.endJoin(gen, x, true)
	if !g.checkToken(tok, y) {
		t.Fatal("a join through the old window spent the new one")
	}
	// Two uses: two devices.
	g.openJoin(tok, now.Add(time.Minute), 2)
	for _, p := range []peer.ID{x, y} {
		gen, ok := g.claimJoin(tok, p)
		if !ok {
			t.Fatalf("claim %s refused", p)
		}
		g.endJoin(gen, p, true)
	}
	z, _ := peer.Decode("12D3KooWLphMMnijVmB8LycnTMPkFC3XqmpyrepEhXSXRhwdAsRN")
	if g.checkToken(tok, z) {
		t.Fatal("a third device got in through a two-use window")
	}
}

// TestGaterInvitesAreIndependent: each invite has its own window. A second invite
// left the first one void (issue 39 item 5: the join of the first failed, and the
// error never said why); now both admit their device, a spent invite and an unknown
// token each say which they are, and CloseJoin closes all.
func TestGaterInvitesAreIndependent(t *testing.T) {
	now := time.Unix(1000, 0)
	g := newGater(slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Time { return now })
	x, _ := peer.Decode("12D3KooWEN6q6A38mPpJayXsAtW482soKD1tEGHWBhLG3hE9xQCK")
	y, _ := peer.Decode("12D3KooWNHjGv7teat4aUKK7QPmcoqWESsRJ328jpMzPKkCP97Q7")
	first, second := []byte("first"), []byte("second")
	if why := g.refusal(first, x); !strings.Contains(why, "no invite is open") {
		t.Fatalf("no window: %q", why)
	}
	g.openJoin(first, now.Add(time.Minute), 1)
	g.openJoin(second, now.Add(2*time.Minute), 1)
	if !g.checkToken(first, x) || !g.checkToken(second, y) {
		t.Fatal("the second invite voided the first")
	}
	gen, ok := g.claimJoin(first, x)
	if !ok {
		t.Fatal("the first invite's join refused")
	}
	g.endJoin(gen, x, true)
	if why := g.refusal(first, y); !strings.Contains(why, "already used") {
		t.Fatalf("a spent invite: %q", why)
	}
	if why := g.refusal([]byte("other"), y); !strings.Contains(why, "no open invite with that token") {
		t.Fatalf("an unknown token: %q", why)
	}
	if gen, ok := g.claimJoin(second, y); !ok {
		t.Fatal("the second invite's join refused after the first was spent")
	} else {
		g.endJoin(gen, y, true)
	}
	if got := g.joinUntil(); !got.Equal(now.Add(2 * time.Minute)) {
		t.Fatalf("joinUntil %v, want the later window's end", got)
	}
	now = now.Add(90 * time.Second) // the first window expired, the second is open
	if !g.joinOpen() || g.checkToken(first, x) {
		t.Fatal("expiry: one window expired, the other is open")
	}
	g.closeJoin()
	if g.joinOpen() || g.checkToken(second, y) {
		t.Fatal("CloseJoin left a window open")
	}
}
