package intentlog

import (
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// blockingPipeline models raft's netPipeline: an answer is handed to Consumer's
// channel (room for one) before the next request may be sent, so with nobody reading
// the answers AppendEntries blocks for good.
type blockingPipeline struct {
	done   chan raft.AppendFuture
	closed chan struct{}
}

// seqFuture is a finished answer to the n-th request (its Term).
type seqFuture struct {
	raft.AppendFuture
	req *raft.AppendEntriesRequest
}

func (f seqFuture) Error() error                        { return nil }
func (f seqFuture) Request() *raft.AppendEntriesRequest { return f.req }
func (f seqFuture) Response() *raft.AppendEntriesResponse {
	return &raft.AppendEntriesResponse{Success: true}
}
func (f seqFuture) n() int { return int(f.req.Term) }

func (p *blockingPipeline) AppendEntries(args *raft.AppendEntriesRequest, _ *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := seqFuture{req: args}
	select {
	case p.done <- f:
		return f, nil
	case <-p.closed:
		return nil, raft.ErrPipelineShutdown
	}
}
func (p *blockingPipeline) Consumer() <-chan raft.AppendFuture { return p.done }
func (p *blockingPipeline) Close() error                       { close(p.closed); return nil }

// Raft stops reading a pipeline's answers when a follower answers with a higher term
// but may go on sending on it: sending must never wait for a reader (the hang of a
// resumed leader's raft.Shutdown, noticePipeline). The answers still reach Raft in
// order, and each is noted for commit notices.
func TestPipelineSendsNeverWaitForAReader(t *testing.T) {
	for _, drained := range []bool{false, true} {
		inner := &blockingPipeline{done: make(chan raft.AppendFuture, 1), closed: make(chan struct{})}
		var p raft.AppendPipeline = inner
		n := &noticeTransport{acks: map[raft.ServerAddress]ack{}}
		if drained {
			p = n.drain(inner, "f", "f")
		}
		sent := make(chan error, 1)
		go func() {
			for i := 1; i <= 300; i++ {
				if _, err := p.AppendEntries(&raft.AppendEntriesRequest{Term: uint64(i), PrevLogEntry: uint64(i)}, nil); err != nil {
					sent <- err
					return
				}
			}
			sent <- nil
		}()
		wait := 10 * time.Second // a deadline for the drained pipeline
		if !drained {
			wait = 500 * time.Millisecond // long enough to see raft's own pipeline stuck
		}
		select {
		case err := <-sent:
			if !drained {
				t.Fatalf("the model is wrong: raft's own pipeline sent 300 requests with nobody reading (%v)", err)
			}
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(wait):
			if drained {
				t.Fatal("a send waited for a reader of the answers")
			}
			_ = p.Close() // the sender gets ErrPipelineShutdown
			<-sent
			continue
		}
		for i := 1; i <= 300; i++ {
			f := (<-p.Consumer()).(seqFuture)
			if f.n() != i {
				t.Fatalf("answer %d came as %d: order lost", i, f.n())
			}
		}
		n.mu.Lock()
		got := n.acks["f"]
		n.mu.Unlock()
		if got != (ack{term: 300, index: 300, id: "f"}) {
			t.Fatalf("noted %+v, want the last answer's term and index (300, 300) from f", got)
		}
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
