//go:debug randseednop=0

package sim

// randseednop=0 makes math/rand.Seed work again (a no-op since Go 1.24), so that a
// replay can seed the global source Raft draws its election timeouts from
// (Config.SeedGlobalRand, set for -seed).
