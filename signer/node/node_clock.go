package node

import (
	"time"

	"github.com/batonhq/baton/election"
	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/internal/knobs"
)

// clockSuspectFor is how long a clamped stamp keeps SuspectedSkew set.
const clockSuspectFor = time.Hour

// ClockState is what the state endpoint and `baton status` say about clocks.
type ClockState struct {
	// Ahead counts this device's lease and commit stamps that were clamped because
	// its wall clock ran ahead of its own earlier stamps or of the record it saw
	// written (election.Lease.Stamp); AheadByMs is how far, the last time, at
	// LastAhead (this device's wall clock).
	Ahead     uint64    `json:"ahead"`
	AheadByMs int64     `json:"ahead_by_ms,omitempty"`
	LastAhead time.Time `json:"last_ahead,omitzero"`
	// Suspect: a stamp was clamped within the last hour.
	Suspect bool `json:"suspect"`
	// LogTime is the replicated clock the dedupe window counts in (unix ms);
	// LogTimeClamped counts the entries whose timestamp the apply did not follow
	// all the way (a writer's clock ahead, or an idle gap: either way the retention
	// grows, never shrinks).
	LogTime        int64  `json:"log_time"`
	LogTimeClamped uint64 `json:"log_time_clamped"`
	// Cluster is the cluster clock an atproto chain's revs are taken from
	// (peerclock.go), on a device with an atproto chain key; nil elsewhere.
	Cluster *ClusterClock `json:"cluster,omitempty"`
}

// ClusterClock is what a device measured of the voters' clocks.
type ClusterClock struct {
	// Known: a majority of the voters measured (this device included); until then
	// the holder signs no atproto commit.
	Known bool `json:"known"`
	// OffsetMs is the cluster clock minus this device's wall clock (ms): negative
	// when this device's clock is ahead of the cluster's.
	OffsetMs int64 `json:"offset_ms"`
	// Measured counts the other voters whose clocks count (measured within a
	// minute).
	Measured int `json:"measured"`
}

func clockState(v intentlog.View, es election.Stats, now time.Time) ClockState {
	c := ClockState{Ahead: es.ClockAhead, LogTime: v.LogTime, LogTimeClamped: v.TimeClamped}
	if es.ClockAhead > 0 {
		c.AheadByMs, c.LastAhead = es.LastClockAhead.By.Milliseconds(), es.LastClockAhead.At
		c.Suspect = now.Sub(es.LastClockAhead.At) < clockSuspectFor
	}
	return c
}

func (c *Config) electionKnobs() *knobs.Election {
	if c.Knobs == nil {
		return nil
	}
	return c.Knobs.Election
}
