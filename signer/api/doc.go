// Package api is the local HTTP API of a baton node (HTTP/1.1 + JSON on a Unix socket,
// mode 0600, and optionally on TCP with a bearer token) and its Go client.
//
//	srv, err := api.Start(n, api.Config{Socket: dir + "/baton.sock"})
//	defer srv.Close(ctx)                       // before n.Stop
//
//	c, err := api.NewClient(dir+"/baton.sock", "") // or "http://127.0.0.1:7421", token
//	st, err := c.State(ctx)                    // answers in ms, even without quorum
//
// Errors are {"error": CODE, "message": text}; Code maps an error to its code and HTTP
// status; the client returns *APIError, which unwraps to package node's sentinels
// (node.ErrNotHolder, node.ErrNoQuorum, ...).
package api
