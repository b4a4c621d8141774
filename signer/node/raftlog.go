package node

import (
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// DefaultRaftLogLevel is the least level of Raft's own messages that reach the
// node's logger when Config.RaftLogLevel is nil: Raft is chatty at info, and its
// warnings are what an operator needs.
const DefaultRaftLogLevel = slog.LevelWarn

// newRaftLogger is hashicorp/raft's hclog.Logger over slog: every key-value pair Raft
// passes becomes a slog attribute (nothing is flattened into the message), under
// component=raft. Messages below level are dropped. Some messages raft logs as
// warnings or errors are part of every normal start, join and shutdown; raftLevels
// gives them the level they deserve.
// departed (nil: none) reports whether a message's arguments name a member that
// stopped gracefully (goodbye.go): Raft's failures to reach it are then not warnings.
func newRaftLogger(l *slog.Logger, level slog.Leveler, departed func(args []any) bool) hclog.Logger {
	if level == nil {
		level = DefaultRaftLogLevel
	}
	return &raftLogger{l: l.With("component", "raft"), level: level, departed: departed}
}

type raftLogger struct {
	l        *slog.Logger
	level    slog.Leveler
	name     string
	implied  []any
	departed func(args []any) bool
}

// contactMsgs are Raft's messages about a member it cannot reach: warnings, unless the
// member said it stops (raftLogger.departed).
var contactMsgs = map[string]bool{
	"failed to heartbeat to":         true,
	"failed to appendEntries to":     true,
	"failed to make requestVote RPC": true,
	"failed to contact":              true,
}

var _ hclog.Logger = (*raftLogger)(nil)

// raftLevels re-levels Raft messages (hashicorp/raft v1.7's texts) that are part of
// normal operation: an election at start-up, a joining device catching up, a removed
// or non-voting device, streams closed under a stopping peer.
var raftLevels = map[string]slog.Level{
	"heartbeat timeout reached, starting election":  slog.LevelInfo,
	"Election timeout reached, restarting election": slog.LevelInfo,
	"no known peers, aborting election":             slog.LevelDebug,
	"failed to get previous log":                    slog.LevelDebug,
	"appendEntries rejected, sending older logs":    slog.LevelDebug,
	"heartbeat timeout reached, not part of a stable configuration or a non-voter, not triggering a leader election": slog.LevelInfo,
	"failed to heartbeat to":         slog.LevelWarn,
	"failed to appendEntries to":     slog.LevelWarn,
	"failed to make requestVote RPC": slog.LevelWarn,
	"failed to contact":              slog.LevelWarn,
}

// closedStreamMsgs are Raft's messages about a stream that a closed connection or an
// expired deadline can end: a peer stopping (a graceful stop logged "failed to flush
// response" on the other device, testnet TestOperatorsCluster), a network change.
// With such an error (closedStream) they are not warnings.
var closedStreamMsgs = map[string]bool{
	"failed to decode incoming command": true,
	"failed to flush response":          true,
	"failed to pipeline appendEntries":  true,
}

// closedStream reports errors of a connection that was closed under Raft (a peer or
// this device stopping): not worth an error line.
func closedStream(args []any) bool {
	for i := 0; i+1 < len(args); i += 2 {
		err, ok := args[i+1].(error)
		if !ok {
			continue
		}
		var te interface{ Timeout() bool }
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
			errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &te) && te.Timeout()) ||
			closedText(err.Error()) {
			return true
		}
	}
	return false
}

// closedText reports the texts of a stream or connection that closed under Raft:
// libp2p's and yamux's resets, a QUIC connection's "connection closed ... go away"
// (a peer that moved), "stream closed", and raft's own "transport shutdown" (this
// device stopping). Seen as ERROR on devices that never moved, on every move of
// another (issue 39 item 8).
func closedText(s string) bool {
	for _, t := range []string{"stream reset", "connection reset", "stream closed", "connection closed", "transport shutdown"} {
		if strings.Contains(s, t) {
			return true
		}
	}
	return false
}

func (r *raftLogger) slogLevel(level hclog.Level, msg string, args []any) slog.Level {
	lv := slog.LevelInfo
	switch level {
	case hclog.Trace:
		lv = slog.LevelDebug - 4
	case hclog.Debug:
		lv = slog.LevelDebug
	case hclog.Warn:
		lv = slog.LevelWarn
	case hclog.Error:
		lv = slog.LevelError
	}
	if o, ok := raftLevels[msg]; ok && o < lv {
		lv = o
	}
	if lv >= slog.LevelWarn && closedStreamMsgs[msg] && closedStream(args) {
		lv = slog.LevelDebug
	}
	if lv >= slog.LevelWarn && contactMsgs[msg] && r.departed != nil && r.departed(args) {
		lv = slog.LevelDebug
	}
	return lv
}

func (r *raftLogger) Log(level hclog.Level, msg string, args ...interface{}) {
	if level == hclog.Off {
		return
	}
	lv := r.slogLevel(level, msg, args)
	if lv < r.level.Level() {
		return
	}
	ctx := context.Background()
	if !r.l.Enabled(ctx, lv) {
		return
	}
	all := make([]any, 0, len(r.implied)+len(args)+2)
	if r.name != "" {
		all = append(all, "raft_logger", r.name)
	}
	all = append(all, r.implied...)
	all = append(all, normalizeArgs(args)...)
	r.l.Log(ctx, lv, msg, all...)
}

// normalizeArgs turns raft's values into plain attributes: keys with dashes get
// underscores, fmt.Stringers (raft.Raft, servers) their string.
func normalizeArgs(args []any) []any {
	out := make([]any, 0, len(args))
	for i := 0; i < len(args); i += 2 {
		k, ok := args[i].(string)
		if !ok || i+1 >= len(args) {
			out = append(out, "arg", args[i])
			i--
			continue
		}
		k = strings.NewReplacer("-", "_", " ", "_").Replace(k)
		v := args[i+1]
		switch x := v.(type) {
		case error, string, int, int64, uint64, bool, float64, time.Duration, time.Time:
		case interface{ String() string }:
			v = x.String()
		}
		out = append(out, k, v)
	}
	return out
}

func (r *raftLogger) Trace(msg string, args ...interface{}) { r.Log(hclog.Trace, msg, args...) }
func (r *raftLogger) Debug(msg string, args ...interface{}) { r.Log(hclog.Debug, msg, args...) }
func (r *raftLogger) Info(msg string, args ...interface{})  { r.Log(hclog.Info, msg, args...) }
func (r *raftLogger) Warn(msg string, args ...interface{})  { r.Log(hclog.Warn, msg, args...) }
func (r *raftLogger) Error(msg string, args ...interface{}) { r.Log(hclog.Error, msg, args...) }

func (r *raftLogger) enabled(l slog.Level) bool {
	return l >= r.level.Level() && r.l.Enabled(context.Background(), l)
}

func (r *raftLogger) IsTrace() bool { return r.enabled(slog.LevelDebug - 4) }
func (r *raftLogger) IsDebug() bool { return r.enabled(slog.LevelDebug) }
func (r *raftLogger) IsInfo() bool  { return r.enabled(slog.LevelInfo) }
func (r *raftLogger) IsWarn() bool  { return r.enabled(slog.LevelWarn) }
func (r *raftLogger) IsError() bool { return r.enabled(slog.LevelError) }

func (r *raftLogger) ImpliedArgs() []interface{} { return r.implied }

func (r *raftLogger) With(args ...interface{}) hclog.Logger {
	c := *r
	c.implied = append(append([]any(nil), r.implied...), normalizeArgs(args)...)
	return &c
}

func (r *raftLogger) Name() string { return r.name }

func (r *raftLogger) Named(name string) hclog.Logger {
	c := *r
	if c.name != "" {
		c.name += "." + name
	} else {
		c.name = name
	}
	return &c
}

func (r *raftLogger) ResetNamed(name string) hclog.Logger {
	c := *r
	c.name = name
	return &c
}

// SetLevel is not supported: the level is the node's (Config.RaftLogLevel).
func (r *raftLogger) SetLevel(hclog.Level) {}

func (r *raftLogger) GetLevel() hclog.Level {
	switch lv := r.level.Level(); {
	case lv <= slog.LevelDebug-4:
		return hclog.Trace
	case lv <= slog.LevelDebug:
		return hclog.Debug
	case lv <= slog.LevelInfo:
		return hclog.Info
	case lv <= slog.LevelWarn:
		return hclog.Warn
	}
	return hclog.Error
}

func (r *raftLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(r.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer whose lines are logged at info (or the level
// hclog's InferLevels finds in them).
func (r *raftLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return stdWriter{r: r, infer: opts != nil && opts.InferLevels}
}

type stdWriter struct {
	r     *raftLogger
	infer bool
}

func (w stdWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := hclog.Info
	if w.infer {
		for tag, lv := range map[string]hclog.Level{"[ERROR]": hclog.Error, "[WARN]": hclog.Warn, "[DEBUG]": hclog.Debug, "[TRACE]": hclog.Trace} {
			if i := strings.Index(line, tag); i >= 0 {
				level, line = lv, strings.TrimSpace(line[i+len(tag):])
				break
			}
		}
	}
	w.r.Log(level, line)
	return len(p), nil
}

// withRaftLogger returns a raft.Config adjuster that installs l as Raft's logger,
// then applies adjust (which may still replace it).
func withRaftLogger(adjust func(*raft.Config), l hclog.Logger) func(*raft.Config) {
	return func(c *raft.Config) {
		c.Logger = l
		if adjust != nil {
			adjust(c)
		}
	}
}
