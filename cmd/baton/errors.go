package main

import "errors"

// Sentinel errors of the command line. Callers (and tests) match them with errors.Is;
// messages wrap them with the file or value concerned.
var (
	// errNotInitialized: the data dir has no device.json (run `baton init`).
	errNotInitialized = errors.New("not initialized")
	// errBadInvite: an invite token that does not decode or validate.
	errBadInvite = errors.New("not a valid invite")
)
