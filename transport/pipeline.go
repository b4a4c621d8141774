package transport

import (
	"sync"

	"github.com/hashicorp/raft"
)

// RaftTransport is raft's NetworkTransport over the libp2p stream layer, with its
// replication pipelines drained (drainedPipeline).
type RaftTransport struct {
	*raft.NetworkTransport
}

// AppendEntriesPipeline returns raft's pipeline to target with its answers always
// taken off the connection.
func (t *RaftTransport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newDrainedPipeline(p), nil
}

// drainedPipeline keeps reading a pipeline's answers whether or not raft still does.
//
// hashicorp/raft v1.7.3's pipelined replication stops reading answers when a follower
// answers with a higher term (pipelineDecode returns), but its sending loop goes on
// until it next looks at its channels. Each send waits for room among the requests in
// flight, which only an answer taken off the connection makes; with nobody taking
// them, once the answers queue (128) and the requests in flight (128) are full,
// AppendEntries blocks with no way out, and raft.Shutdown waits for it for ever: a
// holder that led Raft, paused (SIGSTOP) and resumed, did not stop on SIGTERM
// (TestProcsPauseHolder, 1 run in 10 under -race). Draining the answers into a queue
// keeps every send bounded by the transport's I/O timeout; the queue grows only until
// raft's loop sees its decoder gone and closes the pipeline (one send later).
type drainedPipeline struct {
	raft.AppendPipeline
	out  chan raft.AppendFuture
	done chan struct{}
	once sync.Once
}

func newDrainedPipeline(p raft.AppendPipeline) *drainedPipeline {
	d := &drainedPipeline{AppendPipeline: p, out: make(chan raft.AppendFuture), done: make(chan struct{})}
	go d.run()
	return d
}

func (d *drainedPipeline) run() {
	in := d.AppendPipeline.Consumer()
	var queue []raft.AppendFuture
	for {
		var out chan raft.AppendFuture
		var next raft.AppendFuture
		if len(queue) > 0 {
			out, next = d.out, queue[0]
		}
		select {
		case f := <-in:
			queue = append(queue, f)
		case out <- next:
			queue[0] = nil
			queue = queue[1:]
		case <-d.done:
			return
		}
	}
}

// Consumer returns the answers in the order raft's pipeline gave them.
func (d *drainedPipeline) Consumer() <-chan raft.AppendFuture { return d.out }

// Close closes raft's pipeline and stops the drain.
func (d *drainedPipeline) Close() error {
	err := d.AppendPipeline.Close()
	d.once.Do(func() { close(d.done) })
	return err
}
