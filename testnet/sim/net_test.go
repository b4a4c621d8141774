package sim

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestServeInstalledWhileRequestsArrive: a device's handler of forwarded requests
// is installed after its Raft has started, while other devices may already be
// forwarding to it. The handler and what it reads must reach the delivering
// goroutine with a happens-before edge (under -race, a plain field write was
// reported by CI: seed 12 of TestSim, the forwarder's context read by serve).
func TestServeInstalledWhileRequestsArrive(t *testing.T) {
	nw := newNetwork(1, 2, linkFaults{})
	defer nw.close()
	eps := make([]*endpoint, 2)
	for i := range eps {
		eps[i] = &endpoint{dev: i, addr: raft.ServerAddress(string(rune('a' + i))), dead: make(chan struct{}), raftIn: make(chan raft.RPC, 1)}
		nw.attach(eps[i])
	}
	type handler struct{ ctx context.Context }
	installed := make(chan struct{})
	go func() {
		defer close(installed)
		h := &handler{}
		h.ctx = context.Background() // what the handler reads, written before it is installed
		nw.setServe(eps[1], func(from int, req fwdRequest, reply func(fwdAnswer)) {
			if h.ctx.Err() != nil {
				return
			}
			reply(fwdAnswer{code: codeOK, body: req.payload})
		})
	}()
	answer := make(chan fwdAnswer, 1)
	deadline := time.After(10 * time.Second)
	for i := 0; ; i++ {
		nw.send(eps[0], 1, classForward, nw.request(eps[0], fwdRequest{kind: fwdCall, payload: []byte{byte(i)}}, answer))
		select {
		case a := <-answer:
			if a.code != codeOK {
				t.Fatalf("answer %+v, want codeOK", a)
			}
			<-installed
			return
		case <-deadline:
			t.Fatalf("no answer in 10 s after %d requests", i+1)
		case <-time.After(time.Millisecond):
		}
	}
}
