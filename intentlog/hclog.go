package intentlog

import (
	"bytes"
	"context"
	"log/slog"

	"github.com/hashicorp/go-hclog"
)

// NewHCLogger adapts l for libraries that want an hclog.Logger (hashicorp/raft and
// its network transport), the same adapter Open uses for Raft.
func NewHCLogger(l *slog.Logger) hclog.Logger {
	if l == nil {
		l = slog.Default()
	}
	return newRaftLogger(l)
}

// newRaftLogger adapts slog for hashicorp/raft, which wants an hclog.Logger: hclog
// formats each line, and the writer below hands it to slog at the matching level.
func newRaftLogger(l *slog.Logger) hclog.Logger {
	level := hclog.Info
	if l.Enabled(context.Background(), slog.LevelDebug) {
		level = hclog.Debug
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:            "raft",
		Level:           level,
		Output:          slogWriter{l},
		DisableTime:     true,
		IncludeLocation: false,
	})
}

type slogWriter struct{ l *slog.Logger }

var hclogLevels = []struct {
	tag   []byte
	level slog.Level
}{
	{[]byte("[ERROR]"), slog.LevelError},
	{[]byte("[WARN]"), slog.LevelWarn},
	{[]byte("[INFO]"), slog.LevelInfo},
	{[]byte("[DEBUG]"), slog.LevelDebug},
	{[]byte("[TRACE]"), slog.LevelDebug - 4},
}

func (w slogWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, hl := range hclogLevels {
		if i := bytes.Index(line, hl.tag); i >= 0 {
			level = hl.level
			line = bytes.TrimSpace(line[i+len(hl.tag):])
			break
		}
	}
	w.l.Log(context.Background(), level, string(line))
	return len(p), nil
}
