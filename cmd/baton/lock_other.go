//go:build !unix

package main

// lockDataDir is a no-op where flock is not available; the stores' own locks still
// keep a second node off the data dir.
func lockDataDir(dir string) (func(), error) { return func() {}, nil }
