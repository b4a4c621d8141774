package main

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/transport"
)

// The node's logs, as `baton run` writes them:
//   - one key for this device's ID: "node", with its full peer ID (the packages below
//     tag lines with "node" (a short form), "self" or "id"; they are rewritten here);
//   - durations as strings ("1.5s") in both formats, never JSON nanoseconds;
//   - while the cluster forms (until this device first sees a Raft leader), warnings
//     caused by the missing leader (no leader, timeouts) are debug: they are expected;
//   - a warning or error repeated with the same message and error is written once
//     per repeatWindow, the next one with repeated=N.

// repeatWindow is how long identical warnings are folded into one.
const repeatWindow = 30 * time.Second

type logState struct {
	// raftLevel is --raft-log-level: it also applies to the few Raft lines that reach
	// the logger as flattened text ("raft: ..." from intentlog's own hclog adapter,
	// which its snapshot store uses).
	raftLevel slog.LevelVar
	// level is --log-level (a reload may change both: reload.go).
	level   slog.LevelVar
	self    atomic.Pointer[string] // this device's peer ID, once known
	formed  atomic.Bool            // this device has seen a Raft leader
	mu      sync.Mutex
	repeats map[string]*repeat
}

type repeat struct {
	first time.Time
	n     int
}

func (s *logState) setSelf(id string) { s.self.Store(&id) }

// logHandler applies baton's log rules over a text or JSON handler.
type logHandler struct {
	h       slog.Handler
	st      *logState
	hasNode bool
}

func newLogHandler(h slog.Handler, st *logState) *logHandler {
	return &logHandler{h: h, st: st}
}

func (l *logHandler) Enabled(ctx context.Context, lv slog.Level) bool { return l.h.Enabled(ctx, lv) }

// deviceAttr rewrites a's key to "node" (and its value to the full peer ID) when it
// names this device; keep reports whether to keep it at all.
func (l *logHandler) deviceAttr(a slog.Attr, hasNode bool) (slog.Attr, bool, bool) {
	switch a.Key {
	case "node", "self", "id":
	default:
		return a, true, hasNode
	}
	v := a.Value.Resolve()
	if v.Kind() != slog.KindString {
		return a, true, hasNode
	}
	s := v.String()
	self := ""
	if p := l.st.self.Load(); p != nil {
		self = *p
	}
	mine := a.Key == "self" || (self != "" && (s == self || (len(s) >= 6 && strings.HasSuffix(self, s))))
	if !mine {
		return a, true, hasNode
	}
	if hasNode {
		return a, false, true
	}
	if self != "" {
		s = self
	}
	return slog.String("node", s), true, true
}

func (l *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, 0, len(as))
	has := l.hasNode
	for _, a := range as {
		na, keep, h := l.deviceAttr(a, has)
		has = h
		if keep {
			out = append(out, na)
		}
	}
	return &logHandler{h: l.h.WithAttrs(out), st: l.st, hasNode: has}
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h: l.h.WithGroup(name), st: l.st, hasNode: l.hasNode}
}

// expectedWhileForming reports an error a forming cluster produces: no leader yet.
func expectedWhileForming(err error) bool {
	return errors.Is(err, transport.ErrNoLeader) || errors.Is(err, transport.ErrTimeout) ||
		errors.Is(err, intentlog.ErrTimeout) || errors.Is(err, context.DeadlineExceeded)
}

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level < l.st.raftLevel.Level() && strings.HasPrefix(r.Message, "raft: ") {
		return nil
	}
	nr := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	has := l.hasNode
	errText := ""
	forming := false
	r.Attrs(func(a slog.Attr) bool {
		na, keep, h := l.deviceAttr(a, has)
		has = h
		if !keep {
			return true
		}
		if err, ok := a.Value.Resolve().Any().(error); ok && a.Value.Kind() == slog.KindAny {
			errText = err.Error()
			forming = forming || expectedWhileForming(err)
		}
		nr.AddAttrs(na)
		return true
	})
	if nr.Level == slog.LevelWarn && forming && !l.st.formed.Load() {
		nr.Level = slog.LevelDebug
		nr.AddAttrs(slog.String("while", "the cluster forms"))
		if !l.h.Enabled(ctx, nr.Level) {
			return nil
		}
	}
	if nr.Level >= slog.LevelWarn {
		n, skip := l.st.fold(nr.Message+"\x00"+errText, nr.Time)
		if skip {
			return nil
		}
		if n > 0 {
			nr.AddAttrs(slog.Int("repeated", n))
		}
	}
	return l.h.Handle(ctx, nr)
}

// fold counts a warning: skip when the same one was written less than repeatWindow
// ago; otherwise n is how many were skipped since.
func (s *logState) fold(key string, now time.Time) (n int, skip bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.repeats == nil {
		s.repeats = map[string]*repeat{}
	}
	if r, ok := s.repeats[key]; ok && now.Sub(r.first) < repeatWindow {
		r.n++
		return 0, true
	} else if ok {
		n = r.n
	}
	if len(s.repeats) > 256 {
		for k, r := range s.repeats {
			if now.Sub(r.first) >= repeatWindow {
				delete(s.repeats, k)
			}
		}
	}
	s.repeats[key] = &repeat{first: now}
	return n, false
}

// replaceAttr writes durations as strings (the JSON handler would write nanoseconds).
func replaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// newLogger returns the node's logger and its state (setSelf, formed) for run/join.
func newLogger(c *cli, level, format string) (*slog.Logger, *logState, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, nil, usagef("--log-level %q: want debug, info, warn or error", level)
	}
	st := &logState{}
	st.level.Set(lv)
	opts := &slog.HandlerOptions{Level: &st.level, ReplaceAttr: replaceAttr}
	var h slog.Handler
	switch format {
	case "text":
		h = slog.NewTextHandler(c.stderr, opts)
	case "json":
		h = slog.NewJSONHandler(c.stderr, opts)
	default:
		return nil, nil, usagef("--log-format %q: want text or json", format)
	}
	return slog.New(newLogHandler(h, st)), st, nil
}

func parseLevel(flag, s string) (slog.Level, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(s)); err != nil {
		return 0, usagef("%s %q: want debug, info, warn or error", flag, s)
	}
	return lv, nil
}
