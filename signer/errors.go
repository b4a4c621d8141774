package signer

import "errors"

// Sentinel errors of the loop. Callers match them with errors.Is.
var (
	// ErrBadConfig: NewLoop was given an invalid LoopConfig.
	ErrBadConfig = errors.New("signer: invalid config")
	// ErrRunning: Run was called on a Loop that is already running.
	ErrRunning = errors.New("signer: loop already running")
)
