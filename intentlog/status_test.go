package intentlog

import (
	"testing"
)

// TestIntentStatus: the accessor reports the accepting index, then the signing seq,
// and nothing for an unknown or rejected ID.
func TestIntentStatus(t *testing.T) {
	c := newCluster(t, 1, nil)
	l := c.leader().log
	res := c.propose(ClaimEntry{Holder: "a", Epoch: 1, PrevRev: 0, TS: 100, TTL: 1000})
	if !res.Accepted {
		t.Fatalf("claim: %+v", res)
	}
	res = c.propose(IntentsEntry{Intents: []Intent{put("s1", "c/1", "v"), put("", "c/2", "v")}})
	if !res.Intents[0].Accepted || res.Intents[1].Accepted {
		t.Fatalf("intents: %+v", res.Intents)
	}
	st, ok, err := l.IntentStatus("s1")
	if err != nil || !ok || st.Index != res.Index || st.Seq != 0 || !st.Accepted || st.ID != "s1" {
		t.Fatalf("pending status: %+v %v %v", st, ok, err)
	}
	if _, ok, err := l.IntentStatus("nope"); ok || err != nil {
		t.Fatalf("unknown id: %v %v", ok, err)
	}
	if _, ok, _ := l.IntentStatus(""); ok {
		t.Fatal("rejected intent has a status")
	}
	raw := testCommit{CommitInfo: CommitInfo{Seq: 1, Epoch: 1, Signer: "a", Ops: []Intent{put("s1", "c/1", "v")}}, Sig: "ok"}.encode()
	if cr := c.propose(CommitEntry{Raw: raw}); !cr.Accepted {
		t.Fatalf("commit: %+v", cr)
	}
	st, ok, err = l.IntentStatus("s1")
	if err != nil || !ok || st.Index != res.Index || st.Seq != 1 {
		t.Fatalf("signed status: %+v %v %v", st, ok, err)
	}
	if NewHCLogger(nil) == nil || NewHCLogger(quietLogger()) == nil {
		t.Fatal("no hclog adapter")
	}
}
