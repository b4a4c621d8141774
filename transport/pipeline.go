package transport

import (
	"github.com/hashicorp/raft"
)

// RaftTransport is raft's NetworkTransport over the libp2p stream layer. Its
// replication pipelines' answers are drained by package intentlog, which wraps every
// transport it runs Raft on (intentlog/notice.go: a pipeline's sender must never wait
// for a reader of its answers, raft's shutdown hang).
type RaftTransport struct {
	*raft.NetworkTransport
}
