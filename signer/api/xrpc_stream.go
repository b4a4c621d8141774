package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/chain/atproto"
)

// com.atproto.sync.subscribeRepos: the #commit events of the applied chain over a
// WebSocket, one binary message per event (atproto's event stream: a DAG-CBOR header
// {op: 1, t: "#commit"} then the body), seq = the chain's seq. With ?cursor=N the
// stream starts after seq N (N = 0: from the first commit), out of this replica's
// applied chain, then follows live; without a cursor it starts at the next commit. A
// cursor past the head is answered with a FutureCursor error frame. Every replica
// sends the same bytes for the same cursor: the events are rebuilt from the chain and
// the replica's blocks (atproto.StepOf), with the commit's own time.
//
// Limits. A stream pulls commits from the local replica at the pace its consumer
// reads, so it holds one frame at a time: a slow consumer never grows memory. A
// consumer that has not taken a frame within the write timeout is dropped (nothing
// can reach it any more: no error frame); one that falls behind the head by more
// than DefaultStreamMaxLag commits beyond where it started is told ConsumerTooSlow
// and dropped. Streams are capped per listener (Config.MaxStreams): past it a new stream
// is refused with 503 TooManyStreams before the upgrade. On the Unix socket a stream
// keeps its connection slot (the cap leaves the rest of MaxConns to requests); on
// TCP an upgraded connection leaves the guard's count (conns.go), so streams never
// take the slots authenticated requests need, and only requests that passed the token
// check reach the upgrade. The public listener (Config.XRPCAddr) has streams of its
// own (MaxStreams of them, apart from the TCP API's), upgraded without a token. Pings every StreamPing; a peer that answers none for
// 3*StreamPing is dropped.

// Stream limits.
const (
	// DefaultStreamMaxLag: a consumer further behind the head than it started, by more
	// than this many commits, is dropped with ConsumerTooSlow.
	DefaultStreamMaxLag = 10000
	// StreamPing is the interval of the server's pings.
	StreamPing = 30 * time.Second
	// eventRing frames of the latest events are kept for the streams following the
	// head (built once for all), each at most maxCachedFrame bytes.
	eventRing      = 64
	maxCachedFrame = 256 << 10
	// eventTrees repository trees are kept for the builds (streams backfilling at
	// different positions each find theirs; more reload the tree per frame).
	eventTrees = 4
)

// eventSource builds the #commit frame of an applied commit, keeping the latest in
// a ring and a few repository trees between consecutive commits (atproto.TreePool).
type eventSource struct {
	log *intentlog.Log

	mu    sync.Mutex // one build at a time: streams at the head share each frame
	trees *atproto.TreePool
	ring  [eventRing]cachedFrame
}

type cachedFrame struct {
	seq   uint64
	hash  [32]byte
	frame []byte
}

// frame returns the #commit frame of the applied commit c.
func (s *eventSource) frame(c signer.AppliedCommit) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	slot := &s.ring[c.Seq%eventRing]
	if slot.frame != nil && slot.seq == c.Seq && slot.hash == c.Hash {
		return slot.frame, nil
	}
	e, err := atproto.DecodeEnvelope(c.Raw)
	if err != nil {
		return nil, fmt.Errorf("commit %d: %w", c.Seq, err)
	}
	var prev *atproto.Envelope
	if c.Seq > 1 {
		raw, err := s.log.Commit(c.Seq - 1)
		if err != nil {
			return nil, fmt.Errorf("commit %d: %w", c.Seq-1, err)
		}
		p, err := atproto.DecodeEnvelope(raw)
		if err != nil {
			return nil, fmt.Errorf("commit %d: %w", c.Seq-1, err)
		}
		prev = &p
	}
	var ev atproto.Event
	err = s.log.ReadFormat(func(st intentlog.FormatStore) error {
		ph, step, err := s.trees.StepOf(formatBlocks{st}, prev, e)
		if err != nil {
			return err
		}
		ev, err = atproto.NewEvent(ph, step)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("event of commit %d: %w", c.Seq, err)
	}
	f, err := atproto.CommitFrame(c.Seq, ev, time.UnixMilli(e.Commit.Time))
	if err != nil {
		return nil, err
	}
	if len(f) <= maxCachedFrame {
		*slot = cachedFrame{seq: c.Seq, hash: c.Hash, frame: f}
	}
	return f, nil
}

// streamSlots returns the stream semaphore of the listener r arrived on.
func (a *Server) streamSlots(r *http.Request) chan struct{} {
	switch r.Context().Value(listenerKey{}) {
	case onTCP:
		return a.tcpStreams
	case onPublic:
		return a.pubStreams
	}
	return a.sockStreams
}

func (a *Server) subscribeRepos(w http.ResponseWriter, r *http.Request) {
	q, err := query(r, "cursor")
	if err != nil {
		writeXRPCError(w, err)
		return
	}
	var cursor uint64
	hasCursor := q.Has("cursor")
	if hasCursor {
		if cursor, err = strconv.ParseUint(q.Get("cursor"), 10, 63); err != nil {
			writeXRPCError(w, xerr(http.StatusBadRequest, XRPCInvalidRequest, "cursor %q: a seq (0 or more)", q.Get("cursor")))
			return
		}
	}
	log := a.n.Log()
	if log.View().ChainFormat() != intentlog.CommitFormatAtproto {
		writeXRPCError(w, errNotAtproto)
		return
	}
	slots := a.streamSlots(r)
	select {
	case slots <- struct{}{}:
		defer func() { <-slots }()
	default:
		writeXRPCError(w, xerr(http.StatusServiceUnavailable, XRPCTooManyStreams, "%d streams already open on this listener", cap(slots)))
		return
	}
	up := websocket.Upgrader{HandshakeTimeout: ReadHeaderTimeout,
		Error: func(w http.ResponseWriter, _ *http.Request, status int, reason error) {
			writeXRPCError(w, xerr(status, XRPCInvalidRequest, "subscribeRepos is a WebSocket: %v", reason))
		}}
	conn, err := up.Upgrade(w, r, nil) // answers the client itself (JSON) on failure
	if err != nil {
		return
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer context.AfterFunc(a.base, cancel)()
	defer context.AfterFunc(ctx, func() { _ = conn.Close() })() // unblocks a write in progress

	// Reads: pongs and the close handshake only (the stream is one-way).
	conn.SetReadLimit(1 << 10)
	_ = conn.SetReadDeadline(time.Now().Add(3 * StreamPing))
	conn.SetPongHandler(func(string) error { return conn.SetReadDeadline(time.Now().Add(3 * StreamPing)) })
	go func() {
		defer cancel()
		for {
			_, rd, err := conn.NextReader()
			if err != nil {
				return
			}
			if _, err := io.Copy(io.Discard, rd); err != nil {
				return
			}
		}
	}()
	go func() {
		t := time.NewTicker(StreamPing)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(a.cfg.streamWrite)) != nil {
					cancel()
					return
				}
			}
		}
	}()

	write := func(f []byte) error {
		_ = conn.SetWriteDeadline(time.Now().Add(a.cfg.streamWrite))
		return conn.WriteMessage(websocket.BinaryMessage, f)
	}
	head := log.View().Head.Seq
	from := head + 1
	if hasCursor {
		if cursor > head {
			_ = write(atproto.ErrorFrame(XRPCFutureCursor, fmt.Sprintf("cursor %d is past this replica's head %d", cursor, head)))
			return
		}
		from = cursor + 1
	}
	startLag := head - min(head, from-1)
	err = signer.FollowCommits(ctx, log, from, func(c signer.AppliedCommit) error {
		now := log.View().Head.Seq
		if lag := now - min(c.Seq, now); lag > startLag+a.cfg.streamLag {
			_ = write(atproto.ErrorFrame(XRPCConsumerTooSlow, fmt.Sprintf("%d commits behind the head", lag)))
			return errTooSlow
		}
		f, err := a.events.frame(c)
		if err != nil {
			_ = write(atproto.ErrorFrame(XRPCInternal, err.Error()))
			return err
		}
		return write(f)
	})
	if err != nil && ctx.Err() == nil && err != errTooSlow {
		a.log.Debug("subscribeRepos stream ended", "err", err)
	}
}

var errTooSlow = fmt.Errorf("consumer too slow")
