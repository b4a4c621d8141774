// Package api is the local HTTP API of a baton node (HTTP/1.1 + JSON on a Unix socket,
// mode 0600, and optionally on TCP with a bearer token) and its Go client.
//
//	srv, err := api.Start(n, api.Config{Socket: dir + "/baton.sock"})
//	defer srv.Close(ctx)                       // before n.Stop
//
//	c, err := api.NewClient(dir+"/baton.sock", "") // or "http://127.0.0.1:7421", token
//	st, err := c.State(ctx)                    // answers in ms, even without quorum
//
// Operators' endpoints: GET /v1/peers (every member's reachability, the quorum), GET
// /v1/lease/watch (NDJSON, one node.LeaseChange per lease change as applied),
// POST /v1/lease/campaign (wait until this device holds the lease), GET
// /v1/lease/history?event=&since= (filtered; snake_case). ServeMetrics serves only
// /metrics and /healthz on its own address (`baton run --metrics-addr`):
//
//	ms, err := api.ServeMetrics(n, "127.0.0.1:9420", logger)
//	defer ms.Close()
//
// On an atproto chain, /xrpc/ serves the repository as a PDS would (xrpc.go):
// com.atproto.sync.getRecord (a CAR with the record's MST proof), repo.getRecord (JSON),
// repo.listRecords, repo.describeRepo, sync.getLatestCommit, sync.getRepo (a CAR) and
// sync.subscribeRepos (a WebSocket of #commit frames, seq = the chain's seq;
// xrpc_stream.go says how streams are bounded). Every replica answers the same bytes;
// errors carry XRPC's names (InvalidRequest, RecordNotFound, RepoNotFound, ...).
// Config.XRPCAddr (`baton run --xrpc-addr`) serves these methods alone, without a
// token, on a public listener of their own (for a relay to crawl): every other path is
// 404 there, and its connections are bounded as the TCP API's are (conns.go).
//
// Errors are {"error": CODE, "message": text}; Code maps an error to its code and HTTP
// status; the client returns *APIError, which unwraps to package node's sentinels
// (node.ErrNotHolder, node.ErrNoQuorum, ...). Messages are cleaned by Message: no
// repeated wrapping prefixes, no package names.
package api
