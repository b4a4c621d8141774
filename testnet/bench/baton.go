package bench

import "context"

// runBaton measures baton's sections (load, failover, at rest).
func runBaton(ctx context.Context, o Options, dir string, r *Report, fail func(string, error)) {
}
