package testnet

import (
	"testing"
	"time"
)

// TestDrillAtprotoKillHolder runs the kill-holder drill on an atproto chain (a P-256
// chain key, DAG-CBOR records): the checker verifies every replica's chain through
// the format (the repository replayed: revs increasing, prevData, MST roots), no two
// commits share a rev or a prevData, every replica's stored repository head is its
// chain's, and the signature audit reads every Raft log's signed commits. Before, the
// cluster had only Ed25519 keys and the load's values were not records.
func TestDrillAtprotoKillHolder(t *testing.T) {
	rep := runDrillTestFormat(t, "kill-holder", "atproto")
	failoverTo(t, rep, 5*time.Second)
	hasEvent(t, rep, EventKill)
	hasEvent(t, rep, EventRestart)
	if rep.Check.Commits < 2 || rep.Params.Format != "atproto" {
		t.Fatalf("%d commits, format %q", rep.Check.Commits, rep.Params.Format)
	}
}

// TestDrillAtprotoSkew: the skew drill (the holder's wall clock stepped) on an atproto
// chain: revs still strictly increase across the epochs (the format's verification).
func TestDrillAtprotoSkew(t *testing.T) {
	rep := runDrillTestFormat(t, "skew", "atproto")
	failoverTo(t, rep, 6*time.Second)
	hasEvent(t, rep, EventSkew)
}

// The checker's repository rule: a replica whose stored repository head is not the
// one its chain replays to is a finding.
func TestCheckAtprotoRepoHead(t *testing.T) {
	c := newAtChain(t)
	c.apply(c.propose(1, "3lbbbbbbbbb22", "a"))
	c.apply(c.propose(1, "3lbbbbbbbbc22", "b"))
	good, err := encodeHead(c)
	if err != nil {
		t.Fatal(err)
	}
	in := CheckInput{Chain: c.key.DID(), Devices: []DeviceChain{{Device: "d0", Commits: c.copyRaws(), Repo: good}}}
	if r := Check(in); !r.OK() {
		t.Fatalf("a replica at its chain's head: %v", r.Findings)
	}
	c.raws = c.raws[:1] // the chain read behind the repository
	in.Devices[0].Commits = c.copyRaws()
	if r := Check(in); r.OK() || kinds(r) != FindingRepo {
		t.Fatalf("a repository that is not its chain's: %s", kinds(r))
	}
}
