package testnet

import "errors"

// Sentinel errors. Callers match them with errors.Is.
var (
	// ErrBadConfig: a Cluster, drill or load configuration is invalid.
	ErrBadConfig = errors.New("testnet: invalid config")
	// ErrTimeout: a wait (for a holder, a leader, convergence) hit its deadline.
	ErrTimeout = errors.New("testnet: timed out")
	// ErrNoDevice: a device index is out of range or the device is not running.
	ErrNoDevice = errors.New("testnet: no such running device")
	// ErrUnknownScenario: a drill named a scenario that does not exist.
	ErrUnknownScenario = errors.New("testnet: unknown scenario")
	// ErrProcsUnavailable: multi-process mode cannot run (no binary).
	ErrProcsUnavailable = errors.New("testnet: procs mode not available")
	// ErrExited: a device's process exited while the harness waited for it (it was
	// not stopped by the harness).
	ErrExited = errors.New("testnet: the process exited")
)
