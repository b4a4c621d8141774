package device

import "errors"

// Errors of this package; messages wrap them with the file or value concerned.
var (
	// ErrNotInitialized: the data dir has no device.json (run `baton init`, or Create).
	ErrNotInitialized = errors.New("not initialized")
	// ErrExists: Create found keys already in the data dir (they are never overwritten).
	ErrExists = errors.New("already initialized")
	// ErrBadInvite: an invite that does not decode or validate.
	ErrBadInvite = errors.New("not a valid invite")
	// ErrExpired: the invite's join token expired.
	ErrExpired = errors.New("invite expired")
	// ErrWrongChain: an invite or key for another chain than the data dir's.
	ErrWrongChain = errors.New("wrong chain")
	// ErrRemoved: the device left its cluster (or was removed); it cannot run again
	// from this data dir's Raft state.
	ErrRemoved = errors.New("this device was removed from its cluster")
	// ErrMissingKey: a key file the device had is gone (identity.key of a device with
	// history, chain.key of a signer). Never replaced silently: the message says what
	// to do.
	ErrMissingKey = errors.New("key file missing")
)
