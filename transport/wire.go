package transport

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
)

// Frames on the forward and join protocols: one request and one response per stream.
//
//	request:  kind (1 byte) | timeout ms (uvarint) | payload length (uvarint) | payload
//	response: code (1 byte) | payload length (uvarint) | payload
//
// The timeout carries the caller's remaining deadline so the leader never works for a
// caller that has given up.

// Request kinds.
const (
	kindApply   byte = 1 // forward: payload = entry bytes
	kindJoin    byte = 2 // forward (from a member) or join (with token): payload = joinRequest JSON
	kindRemove  byte = 3 // forward: payload = peer ID to remove
	kindAddrs   byte = 4 // forward: payload = peer ID whose addresses are wanted
	kindMembers byte = 5 // join: payload = joinRequest JSON (token only); answers the member list
	kindBarrier byte = 6 // forward: empty payload; answers the leader's applied index (8 bytes, big endian) after a read barrier
	kindCall    byte = 7 // forward, to one member (not the leader): payload for ClusterConfig.OnCall; answers its result
)

// Response codes.
const (
	codeOK         byte = 0
	codeNotLeader  byte = 1 // payload = leader peer ID if known
	codeNotMember  byte = 2
	codeAppError   byte = 3 // payload = error text
	codeBadToken   byte = 4
	codeBadRequest byte = 5 // payload = error text
	codeNoHandler  byte = 6 // the request kind has no handler configured on the receiver (ErrNoHandler)
	codeTimeout    byte = 7 // the handler failed once the request's deadline (the caller's) had passed
)

// DefaultMaxFrameSize bounds one forwarded entry or result.
const DefaultMaxFrameSize = 16 << 20

func writeFrame(w *bufio.Writer, head []byte, payload []byte) error {
	var buf [binary.MaxVarintLen64]byte
	if _, err := w.Write(head); err != nil {
		return err
	}
	n := binary.PutUvarint(buf[:], uint64(len(payload)))
	if _, err := w.Write(buf[:n]); err != nil {
		return err
	}
	if _, err := w.Write(payload); err != nil {
		return err
	}
	return w.Flush()
}

func writeRequest(w *bufio.Writer, kind byte, timeoutMS uint64, payload []byte) error {
	head := make([]byte, 1, 1+binary.MaxVarintLen64)
	head[0] = kind
	head = binary.AppendUvarint(head, timeoutMS)
	return writeFrame(w, head, payload)
}

func writeResponse(w *bufio.Writer, code byte, payload []byte) error {
	return writeFrame(w, []byte{code}, payload)
}

func readPayload(r *bufio.Reader, max int) ([]byte, error) {
	n, err := binary.ReadUvarint(r)
	if err != nil {
		return nil, err
	}
	if n > uint64(max) {
		return nil, fmt.Errorf("%w: %d bytes > %d", ErrTooLarge, n, max)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

func readRequest(r *bufio.Reader, max int) (kind byte, timeoutMS uint64, payload []byte, err error) {
	if kind, err = r.ReadByte(); err != nil {
		return 0, 0, nil, err
	}
	if timeoutMS, err = binary.ReadUvarint(r); err != nil {
		return 0, 0, nil, err
	}
	payload, err = readPayload(r, max)
	return kind, timeoutMS, payload, err
}

func readResponse(r *bufio.Reader, max int) (code byte, payload []byte, err error) {
	if code, err = r.ReadByte(); err != nil {
		return 0, nil, err
	}
	payload, err = readPayload(r, max)
	return code, payload, err
}
