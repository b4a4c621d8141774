package node

import (
	"context"
	"fmt"

	"github.com/hashicorp/raft"
	"github.com/libp2p/go-libp2p/core/peer"
)

// callMoveLeader asks the Raft leader to hand leadership to the member named in the
// payload (MoveLeader).
const callMoveLeader byte = 10

// Promote makes the non-voter id a voter, through the leader (etcd's member promote).
// ErrNotFound when id is not a member; ErrConflict when it votes already.
func (n *Node) Promote(ctx context.Context, id string) error {
	if n.cluster == nil {
		return fmt.Errorf("promote: %w", ErrUnsupported)
	}
	p, err := peer.Decode(id)
	if err != nil {
		return fmt.Errorf("%w: member id %q: %w", ErrBadRequest, id, err)
	}
	if !n.isMember(ctx, id) {
		return fmt.Errorf("%w: %s is not a member", ErrNotFound, id)
	}
	ms, err := n.cluster.Members()
	if err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	for _, m := range ms {
		if m.ID == p && m.Suffrage == raft.Voter {
			return fmt.Errorf("%w: %s is a voter already", ErrConflict, shortID(id))
		}
	}
	if err := n.cluster.Add(ctx, peer.AddrInfo{ID: p}, false); err != nil {
		return fmt.Errorf("promote: %w", err)
	}
	n.logger.Info("member promoted to voter", "peer", id)
	return nil
}

// MoveLeader hands Raft leadership to voter id (etcdctl move-leader): this device
// asks the leader, which transfers it. The Raft leader and the lease holder are often
// different devices; the leader is where writes are ordered, so an operator may want
// it on the best-connected device. ErrNotFound when id is not a voter.
func (n *Node) MoveLeader(ctx context.Context, id string) error {
	if n.cluster == nil {
		return fmt.Errorf("move leader: %w", ErrUnsupported)
	}
	if _, err := peer.Decode(id); err != nil {
		return fmt.Errorf("%w: member id %q: %w", ErrBadRequest, id, err)
	}
	ms, err := n.cluster.Members()
	if err != nil {
		return fmt.Errorf("move leader: %w", err)
	}
	voter := false
	for _, m := range ms {
		voter = voter || m.ID.String() == id && m.Suffrage == raft.Voter
	}
	if !voter {
		return fmt.Errorf("%w: %s is not a voter", ErrNotFound, shortID(id))
	}
	_, leader := n.log.Leader()
	switch string(leader) {
	case "":
		return fmt.Errorf("move leader: %w", ErrNoQuorum)
	case id:
		return nil // there already
	case n.id:
		return n.leadTo(id)
	}
	if _, err := n.net.Call(ctx, string(leader), append([]byte{callMoveLeader}, id...)); err != nil {
		return fmt.Errorf("move leader: asking the leader %s: %w", shortID(string(leader)), err)
	}
	return nil
}

// leadTo transfers this leader's leadership to id and waits for the handover.
func (n *Node) leadTo(id string) error {
	r := n.log.Raft()
	if r.State() != raft.Leader {
		return fmt.Errorf("move leader: %w", ErrNotLeader)
	}
	if err := r.LeadershipTransferToServer(raft.ServerID(id), raft.ServerAddress(id)).Error(); err != nil {
		return fmt.Errorf("move leader to %s: %w", shortID(id), err)
	}
	n.logger.Info("Raft leadership moved", "to", id)
	return nil
}

// handleMoveLeader answers a member's callMoveLeader.
func (n *Node) handleMoveLeader(from string, payload []byte) ([]byte, error) {
	id := string(payload)
	if _, err := peer.Decode(id); err != nil {
		return nil, fmt.Errorf("%w: member id %q", ErrBadRequest, id)
	}
	n.logger.Info("asked to move Raft leadership", "by", from, "to", id)
	return nil, n.leadTo(id)
}
