package acme

import (
	"context"
	"log/slog"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapToSlog is a zap logger (what certmagic logs to) that writes to l: its info
// lines (each step of an order, each challenge served) at debug, its warnings and
// errors (it retries them itself; Manager.event says what an operator needs) at warn.
func zapToSlog(l *slog.Logger) *zap.Logger { return zap.New(&slogCore{l: l}) }

type slogCore struct {
	l     *slog.Logger
	attrs []any
}

func level(l zapcore.Level) slog.Level {
	if l >= zapcore.WarnLevel {
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

func (c *slogCore) Enabled(l zapcore.Level) bool {
	return c.l.Enabled(context.Background(), level(l))
}

func (c *slogCore) With(fields []zapcore.Field) zapcore.Core {
	return &slogCore{l: c.l, attrs: append(append([]any(nil), c.attrs...), attrsOf(fields)...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fields []zapcore.Field) error {
	args := append(append([]any{"component", "acme"}, c.attrs...), attrsOf(fields)...)
	c.l.Log(context.Background(), level(e.Level), e.Message, args...)
	return nil
}

func (c *slogCore) Sync() error { return nil }

// attrsOf turns zap fields into slog's key-value pairs (zap's own encoding of each).
func attrsOf(fields []zapcore.Field) []any {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fields {
		f.AddTo(enc)
	}
	args := make([]any, 0, 2*len(fields))
	for _, f := range fields { // in the order given, not the map's
		if v, ok := enc.Fields[f.Key]; ok {
			args = append(args, f.Key, v)
		}
	}
	return args
}
