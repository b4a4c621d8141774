package main

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
)

// A reload (SIGHUP: systemd's `systemctl reload baton`) reads the settings file again
// (--settings, the BATON_<FLAG>=value file the service's environment comes from) and
// applies what a running device can change: the log levels. Any other setting that
// differs from the running one is logged as taking effect at the next start.

// reloadable are the settings a reload applies.
var reloadable = map[string]bool{"log-level": true, "raft-log-level": true}

// readSettings reads a BATON_<FLAG>=value file (systemd's EnvironmentFile format:
// blank lines and # comments skipped, values optionally quoted) into flag names.
func readSettings(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, "BATON_") {
			return nil, fmt.Errorf("%s:%d: want BATON_<FLAG>=value", path, n)
		}
		v = strings.Trim(strings.TrimSpace(v), `"'`)
		out[strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(k, "BATON_"), "_", "-"))] = v
	}
	return out, sc.Err()
}

// reload applies the settings file to a running device (see above).
func reload(path string, fs *pflag.FlagSet, logs *logState, logger *slog.Logger) {
	settings, err := readSettings(path)
	if err != nil {
		logger.Warn("reload: could not read the settings; nothing changed", "file", path, "err", err)
		return
	}
	var applied, later []string
	for name, v := range settings {
		switch {
		case reloadable[name]:
			lv, err := parseLevel("--"+name, v)
			if err != nil {
				logger.Warn("reload: a bad value; kept the running one", "setting", name, "value", v, "err", err)
				continue
			}
			if name == "log-level" {
				logs.level.Set(lv)
			} else {
				logs.raftLevel.Set(lv)
			}
			applied = append(applied, name+"="+v)
		default:
			if f := fs.Lookup(name); f != nil && f.Value.String() != v && !fs.Changed(name) {
				later = append(later, name)
			}
		}
	}
	logger.Info("reloaded the settings", "file", path, "applied", strings.Join(applied, " "),
		"at_next_start", strings.Join(later, " "))
}

// reloadOnHangup reloads path on every SIGHUP until ctx ends ("" : SIGHUP is ignored).
func reloadOnHangup(ctx context.Context, path string, fs *pflag.FlagSet, logs *logState, logger *slog.Logger) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGHUP)
	defer signal.Stop(ch)
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			if path == "" {
				logger.Info("SIGHUP: no --settings file to reload (the service's unit names /etc/default/baton)")
				continue
			}
			reload(path, fs, logs, logger)
		}
	}
}
