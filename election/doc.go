// Package election decides which device holds baton's signing lease.
//
// The lease is the reserved `__lease__` record of the intent log: {holder, epoch, ts,
// ttl, rev}, where rev is the log index of the record's last change. The log's
// deterministic apply only stores it: every lease write names the rev of the record it
// was decided on (PrevRev), so a claim is a compare-and-set on the whole record (and
// the epoch must be the stored one + 1), and renew, release and transfer check holder,
// epoch and rev. Everything that
// involves time happens here, outside the apply, on each device: a pure policy
// (Policy.Decide) that reads no clock, and a Lease type that feeds it clock readings
// and local observations and writes the entries it calls for. The lease only decides
// who gets to try and keeps a live holder from being disturbed; the apply's commit
// fencing (a commit must carry the stored holder and epoch) is what keeps the chain
// fork-free whatever the clocks do.
//
// # Rules, and why
//
// Each rule below is implemented in Policy.Decide (policy.go) or Lease (lease.go) and
// tested in policy_test.go / lease_test.go.
//
//  1. Reads never block on Raft. Every read goes to Log.View, the locally applied
//     state. In the production system this package's design starts from, the lease's
//     read went through a blocking "update then get" on the replicated store; one stalled
//     drain on an unconverged replica froze the whole sign loop (and the state endpoint
//     with it). A slightly stale view is safe: the apply still linearises claims.
//
//  2. Never claim a live lease held by another device. In the same system a freshly
//     booted device claimed the lease before it had replicated the current holder's
//     still-valid record: split brain. Hence the observed-time guard: a record is lapsed
//     only when this device has itself observed that exact record unchanged for at
//     least ttl on its monotonic clock (FirstSeen; a booted device starts counting when
//     it first reads the record, so it waits a full TTL) AND its wall clock agrees
//     (now - ts >= ttl). The monotonic count protects against wall-clock skew (a device
//     whose clock runs an hour ahead would otherwise see every lease as expired); the
//     wall check is a second, independent opinion (the wall clock is NTP-disciplined,
//     the monotonic clock is not: an observer whose crystal runs fast is caught by it).
//     The count starts when this device's replica stored the entry that made the
//     record (the record's Rev, when the Log is a StoreTimer), never later than when
//     it sees the record applied: a renewal that a dying Raft leader replicated but
//     did not get committed to the followers is applied only after the next election,
//     and counting from that apply made a leading holder's crash cost a TTL after the
//     election instead of a TTL after the renewal. A record whose entry this process
//     did not store (replayed at start, from a snapshot) counts from the apply, so a
//     booted device still waits a full TTL.
//
//  3. A disagreeing wall clock delays a claim by at most one more TTL: after 2*ttl
//     observed unchanged the record is lapsed whatever the clocks say, and the
//     disagreement is reported (Decision.SuspectedSkew, Stats.SkewSuspicions and
//     LastSkew). Without this, a holder whose clock ran ahead and then died would block
//     failover for as long as its clock was ahead.
//
//  4. Released (holder "") or never-held records are free at once: no timing rule
//     applies because the holder gave the lease up. Graceful handover thus takes a few
//     Raft round trips, not a TTL. The releasing device itself stands off for one TTL
//     (WhyStandoff, ErrStandoff) so that a standby, not the releaser's own loop, picks
//     the lease up; if nobody does, it may claim again. The standoff ends as soon as
//     another device has taken the lease (a later handover must not find every
//     standby standing off), and it never delays
//     adopting a lease transferred to this device by name (rule 8's transfer case).
//
//  5. Renew is write-gated: the holder writes a RenewEntry only once ttl/2 has passed
//     since its last successful lease write; before that Renew returns true without
//     writing. The production system renewed every tick: every renewal carries a new ts,
//     so nothing deduplicated it, and the append-only log grew by ~25 KB/s at rest
//     forever. Gated, there are at most two lease entries per TTL at rest. The renew
//     ts is max(wall now, stored ts + 1 ms) so that a renewal always changes the record
//     (observers restart their count on a change).
//
//  6. May-sign (the signing gate, Lease.Holds): the record names this device at an
//     epoch it wrote, and less than SignFraction*ttl (default 2/3, in (1/2, 0.9]) has
//     passed since it PROPOSED its last successful claim or renewal. Proposal time, not
//     apply time: other devices start counting only once their replica has stored the
//     entry (rule 2), which none can do before it was proposed, so the window ends at least (1-SignFraction)*ttl before anyone can consider
//     the lease lapsed; that margin absorbs clock-rate differences and the time from the
//     Holds check to the commit's apply. Elapsed time is the larger of the monotonic and
//     the wall elapsed time: a suspended laptop's monotonic clock stands still while the
//     wall clock runs on, and a holder must not wake up believing it still holds a lease
//     that lapsed while it slept. When the window closes without a renewal the hold ends
//     (Lost closes); a later claim at epoch+1 (rule 7) starts a new hold.
//
//  7. A holder renews only inside its may-sign window. Once the window has closed
//     without a renewal (a late loop, a pause) it does not renew: others, whose clocks
//     may run faster, may already see the lease lapsed and be claiming. It competes for
//     epoch+1 through the CAS like everyone else instead (WhyOwnLapsed), which also
//     fences anything it signed before. A renewal proposed inside the window that lands
//     late (after a standby observed the old record for a TTL and synced) changes the
//     record's rev, so the standby's claim, decided on the old rev, loses (ErrLostRace,
//     stale_rev) instead of leaving two devices believing they hold. A renewal refused
//     with stale_rev while the record still names this device at its epoch is not a lost
//     lease (ErrStaleRecord: its view is behind, typically its own earlier write whose
//     outcome it did not learn); it renews on the refreshed record at the next tick,
//     and the may-sign window keeps bounding signing meanwhile.
//
//  8. A record naming this device that it has no memory of writing (WhyAdopt). This
//     happens after a restart (the previous incarnation's record), after a transfer to
//     this device, or when two processes wrongly share one identity. The device never
//     signs on such a record: it must first make a fresh write. It claims epoch+1
//     through the CAS at once when the evidence says the record is legitimately its own:
//     it has had no lease write accepted since it started (a restart: the bump fences
//     whatever the previous incarnation had in flight), or the record it observed just
//     before was another device's at epoch-1 (a transfer). Otherwise (it held the lease
//     in this process and sees its ID at an epoch it did not write: a twin process) it
//     treats the record like any other holder's and waits it out, so twins do not bump
//     the epoch back and forth every tick. A claim whose outcome was unknown (Propose
//     returned an error) is remembered: if the record later shows its exact epoch and ts
//     and this process's nonce (every claim carries one, random per process, and the
//     record keeps it while the hold lasts), it is ours, counted from its proposal time.
//     The nonce is what tells a restarted process's claim from the earlier process's
//     claim of the same epoch at the same millisecond.
//
//  9. After winning a claim the Lease waits until the local replica has applied it
//     (AppliedIndex >= Result.Index) before Claim returns; Holds is false until the local
//     record shows the claim, so the signer never builds on a head it has not seen.
//
//  10. Losing the lease is a hard signal: Lost()/HoldContext()/Tenure() give a channel
//     and a context that close the moment the hold ends (record changed, released,
//     transferred, window closed). With a Clock implementing AfterFuncClock (SystemClock,
//     ManualClock) the window's end fires a timer; Follow watches the log (Watcher) and
//     observes every applied change; otherwise either is noticed at the next call.
//
//  11. Claims of a lapsed lease call Log.Sync first when the Log implements Syncer. A
//     replica that fell behind and saw an old record "unchanged" for a TTL would
//     propose a claim that the apply's CAS refuses (stale_rev, the holder had renewed);
//     syncing first shows it the renewal and saves the doomed proposal.
//
//  12. Timing: CheckTiming refuses a tick or a proposal timeout above a third of the
//     TTL, which would leave a hold's window too short for one proposal. Expiry as
//     shown to people comes from Decision.ExpiresIn (this device's observation guard
//     and window), not from ts + ttl on a wall clock.
//
// # Limits
//
// What the rules cannot do, and what covers it:
//
//   - Clock rates. The window's margin tolerates an observer's clock running up to
//     1/SignFraction times as fast as the holder's (1.5 at the default). The property
//     tests drive devices at rates from 0.9 to 1.1 with interleaved proposals.
//   - A holder whose clocks both stood still through a pause (a VM paused without its
//     clocks catching up) and whose replica is stale believes it still holds. Nothing
//     local can tell; the apply's fencing rejects its commits and its renewal
//     (TestFrozenHolderRenewRejected), and from then on it does not hold.
//   - Without a Syncer, a replica that lags by a whole TTL proposes claims that the
//     CAS refuses (stale_rev) until it catches up; nothing is lost but proposals. The
//     node should supply Sync (a barrier on the leader, or a read index forwarded to
//     it).
//   - An operator's Steal takes a live lease by design; until the robbed holder's
//     replica applies the steal it may still believe it holds the older epoch.
//
// Epochs are never reused (a release keeps the epoch; every claim is epoch+1), as in
// the file-based lease system this design also learned from; there, as here, an
// operator's steal carries a reason and lands in the lease history.
//
// # Usage
//
// The node builds one Lease per device over its Log (local Raft node, proposals
// forwarded to the leader) and runs the signer loop:
//
//	lease, err := election.New(log, peerID, election.SystemClock(), election.Options{})
//	if err != nil { ... }
//	for {
//		held, err := lease.RenewOrClaim(ctx)      // 1. every tick (and on applied changes)
//		if err != nil { log it; Stats counts it }
//		if held {
//			t, ok := lease.Tenure()                // 2. epoch + Done for this hold
//			if ok { sign pending intents under t.Epoch, checking lease.Holds() before
//			        each commit and abandoning work when t.Done closes }
//		}
//		d := lease.Decide()                        // 3. sleep until the decision can change,
//		sleep(min(tick, d.WakeIn(clock.Mono())))   //    or an applied change, or ctx done
//	}
//
// Run lease.Follow(ctx) in a goroutine when the Log can be watched (*intentlog.Log can),
// so that Lost fires on an applied change without waiting for the loop. On graceful
// shutdown call Release; for a targeted handover, Transfer. Operators use
// Steal with a reason for a wedged holder. Tests use ManualClock and drive the loop by
// hand.
package election
