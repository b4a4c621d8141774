package node

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
)

// memberKeys are the log attributes whose value names a member (baton's, libp2p's and
// Raft's own keys): namedLogs writes the member's name beside its ID there.
var memberKeys = map[string]bool{
	"peer": true, "member": true, "holder": true, "from": true, "to": true, "leader": true,
	"voter": true, "by": true, "server-id": true, "target": true, "remote-peer": true,
}

// namedLogs is a log handler that shows a member by its name and the end of its ID
// ("laptop (aN1816xy)") wherever a member key (memberKeys) holds a member's full or
// short ID whose name this device knows: every component's log lines (transport, Raft,
// node) name devices as status and members do, and no call site looks a name up.
type namedLogs struct {
	h  slog.Handler
	ns *names
}

func (h namedLogs) Enabled(ctx context.Context, l slog.Level) bool { return h.h.Enabled(ctx, l) }

func (h namedLogs) Handle(ctx context.Context, r slog.Record) error {
	var attrs []slog.Attr
	changed := false
	r.Attrs(func(a slog.Attr) bool {
		if b, ok := h.named(a); ok {
			a, changed = b, true
		}
		attrs = append(attrs, a)
		return true
	})
	if !changed {
		return h.h.Handle(ctx, r)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(attrs...)
	return h.h.Handle(ctx, out)
}

func (h namedLogs) WithAttrs(as []slog.Attr) slog.Handler {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = a
		if b, ok := h.named(a); ok {
			out[i] = b
		}
	}
	return namedLogs{h: h.h.WithAttrs(out), ns: h.ns}
}

func (h namedLogs) WithGroup(g string) slog.Handler {
	return namedLogs{h: h.h.WithGroup(g), ns: h.ns}
}

// named returns a with the member's name beside its ID, and whether it changed it.
func (h namedLogs) named(a slog.Attr) (slog.Attr, bool) {
	if !memberKeys[a.Key] {
		return a, false
	}
	var s string
	switch v := a.Value.Resolve(); v.Kind() {
	case slog.KindString:
		s = v.String()
	case slog.KindAny:
		switch x := v.Any().(type) {
		case fmt.Stringer: // peer.ID
			s = x.String()
		default:
			if rv := reflect.ValueOf(x); rv.Kind() == reflect.String { // raft.ServerID
				s = rv.String()
			}
		}
	}
	if id, name := h.ns.find(s); name != "" {
		return slog.String(a.Key, name+" ("+shortID(id)+")"), true
	}
	return a, false
}

// find returns the member whose full ID is s, or whose short ID (shortID) s is, and
// its name ("" when s is neither or the member has no name known here).
func (ns *names) find(s string) (id, name string) {
	if len(s) < 8 || strings.ContainsAny(s, " (") {
		return "", ""
	}
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.self != "" && (s == ns.self || len(s) == 8 && strings.HasSuffix(ns.self, s)) {
		return ns.self, ns.selfName
	}
	if name := ns.m[s]; name != "" {
		return s, name
	}
	if len(s) == 8 {
		for id, name := range ns.m {
			if strings.HasSuffix(id, s) {
				return id, name
			}
		}
	}
	return "", ""
}

// setSelf makes find name this device too (its own ID is in no names file).
func (ns *names) setSelf(id, name string) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	ns.self, ns.selfName = id, name
}
