package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/chain/atproto"
	"github.com/batonhq/baton/signer/chain/atproto/migrate"
	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
)

const submitLong = `Submits one intent to the node. The id is the idempotency key: submitting the same id
again returns the original result and changes nothing (default: a random id, printed).
--wait committed (default) returns once the intent is in the Raft log (it will be
signed exactly once while a quorum survives); --wait signed returns once the commit that
contains it is applied on this device (prints its seq and hash). --file - reads stdin.
Without a quorum nothing can be accepted: the command gives up after --timeout.
On an atproto chain, --car FILE puts every record of a repository CAR (what
com.atproto.sync.getRepo or ` + "`baton export --car`" + ` gives): an account's records
brought onto the chain at the same paths with the same CIDs, one intent each, whose id
is derived from the path and the CID (submitting the CAR again changes nothing). The
chain's history starts where it started; the CAR's commits are not carried over.
--json-record takes the value (--value or --file) as a record in atproto's JSON
({"$type": ...}, "$link" for CIDs, "$bytes" for bytes, integers only) and sends it as
the DAG-CBOR an atproto chain stores (what com.atproto.repo.getRecord gives back).`

const submitExample = `  baton submit --data /tmp/b1 --path notes/1 --value 'hi'
  baton submit --data /tmp/a1 --path app.bsky.feed.post/3l3qo2vut0001 --json-record --value '{"$type":"app.bsky.feed.post","text":"hi","createdAt":"2026-12-02T17:00:00.000Z"}'
  baton submit --data /tmp/b1 --id post-2 --path posts/2 --file post.json --wait signed
  baton submit --data /tmp/b1 --path posts/1 --del
  baton submit --data /tmp/a1 --car repo.car --wait signed`

func (c *cli) submitCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "submit (--path COLLECTION/KEY (--value V | --file F | --del) | --car FILE) [--wait signed]",
		Short: "submit one intent (put or delete a record)", Long: submitLong, Example: submitExample, Args: noArgs}
	fs := cmd.Flags()
	f := c.addAPIFlags(fs, 15*time.Second, "waiting for the node (no quorum: nothing is accepted)")
	id := fs.String("id", "", "intent `id` (idempotency key; default random)")
	path := fs.String("path", "", "record `path` collection/key")
	value := fs.String("value", "", "the record's new `value`")
	file := fs.String("file", "", "read the value from `FILE` (- for stdin)")
	del := fs.Bool("del", false, "delete the record")
	wait := fs.String("wait", "committed", "wait until `committed` (in the Raft log) or signed")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	jsonRecord := fs.Bool("json-record", false, "the value is a record in atproto's JSON: send it as DAG-CBOR (an atproto chain's records)")
	carFile := fs.String("car", "", "on an atproto chain: put every record of a repository CAR `file` (getRepo's, export --car's)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *carFile != "" {
			if *path != "" || *value != "" || *file != "" || *del || *id != "" || *asJSON || *jsonRecord {
				return usagef("--car goes without --path, --value, --file, --del, --id, --json and --json-record")
			}
			w, err := parseWait(*wait)
			if err != nil {
				return err
			}
			return c.submitCAR(cmd.Context(), f, *carFile, w)
		}
		if *path == "" {
			return usagef("--path is required")
		}
		n := 0
		for _, set := range []bool{*value != "", *file != "", *del} {
			if set {
				n++
			}
		}
		if n != 1 {
			return usagef("give exactly one of --value, --file or --del")
		}
		if *jsonRecord && *del {
			return usagef("--json-record goes with --value or --file, not --del")
		}
		w, err := parseWait(*wait)
		if err != nil {
			return err
		}
		in := intentlog.Intent{ID: *id, Op: intentlog.OpPut, Path: *path, Value: []byte(*value)}
		switch {
		case *del:
			in.Op, in.Value = intentlog.OpDel, nil
		case *file == "-":
			b, err := io.ReadAll(io.LimitReader(c.stdin, api.MaxRequestBody+1))
			if err != nil {
				return err
			}
			in.Value = b
		case *file != "":
			b, err := device.ReadSmall(*file, api.MaxRequestBody)
			if err != nil {
				return err
			}
			in.Value = b
		}
		if *jsonRecord {
			rec, err := migrate.RecordFromJSON(in.Value)
			if err != nil {
				return usagef("--json-record: %v", err)
			}
			in.Value = rec
		}
		if in.ID == "" {
			b := make([]byte, 8)
			_, _ = rand.Read(b)
			in.ID = "cli-" + hex.EncodeToString(b)
		}
		if err := node.ValidateIntent(&in); err != nil {
			return usagef("%s", api.Message(err))
		}
		cl, cctx, done, err := f.open(cmd.Context())
		if err != nil {
			return err
		}
		defer done()
		res, err := cl.Submit(cctx, in, w)
		if err != nil {
			// Say why nothing answered: without a quorum nothing can be accepted.
			sctx, scancel := context.WithTimeout(cmd.Context(), 2*time.Second)
			st, serr := cl.State(sctx)
			scancel()
			if serr == nil && !st.Quorum.OK && errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("intent %s not accepted within --timeout %s: no quorum (this device reaches %d of %d voters, %d needed); retry with --id %s once a majority is back",
					in.ID, *f.timeout, st.Quorum.Reachable, st.Quorum.Voters, st.Quorum.Needed, in.ID)
			}
			if errors.Is(err, node.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("intent %s: %s (it may still be accepted: submit again with --id %s to learn its outcome)", in.ID, describe(f.apiErr(err)), in.ID)
			}
			return fmt.Errorf("intent %s: %w", in.ID, f.apiErr(err))
		}
		if *asJSON {
			return json.NewEncoder(c.stdout).Encode(res)
		}
		dup := ""
		if res.Duplicate {
			dup = " (duplicate: the original result)"
		}
		if res.Seq > 0 {
			fmt.Fprintf(c.stdout, "signed id=%s index=%d seq=%d hash=%s%s\n", res.ID, res.Index, res.Seq, res.Hash, dup)
		} else {
			fmt.Fprintf(c.stdout, "committed id=%s index=%d%s\n", res.ID, res.Index, dup)
		}
		return nil
	}
	return cmd
}

func parseWait(s string) (node.Wait, error) {
	switch s {
	case "committed":
		return node.WaitCommitted, nil
	case "signed":
		return node.WaitSigned, nil
	}
	return 0, usagef("--wait %q: want committed or signed", s)
}

// submitCAR puts every record of a repository CAR, one intent each (id: "car-" and
// the first 16 bytes of SHA-256(path, 0, CID) in hex, so that a second run is all
// duplicates), waiting for each to be committed and for the last as w says.
func (c *cli) submitCAR(ctx context.Context, f *apiFlags, file string, w node.Wait) error {
	fh, err := os.Open(file)
	if err != nil {
		return usagef("--car: %v", err)
	}
	rp, err := migrate.ReadCARRecords(ctx, fh)
	fh.Close()
	if err != nil {
		return fmt.Errorf("--car %s: %w", file, err)
	}
	if len(rp.Records) == 0 {
		return fmt.Errorf("--car %s: the repository of %s holds no records", file, rp.DID)
	}
	cl, cctx, done, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	added, dups := 0, 0
	var last node.SubmitResult
	for i, rec := range rp.Records {
		sum := sha256.Sum256(append(append([]byte(rec.Path), 0), atproto.CIDOf(rec.Value)...))
		in := intentlog.Intent{ID: "car-" + hex.EncodeToString(sum[:16]), Op: intentlog.OpPut, Path: rec.Path, Value: rec.Value}
		wi := node.WaitCommitted
		if i == len(rp.Records)-1 {
			wi = w
		}
		res, err := cl.Submit(cctx, in, wi)
		if err != nil {
			return fmt.Errorf("--car: record %d of %d (%s): %w (submitting the CAR again resumes: the records already in are duplicates)", i+1, len(rp.Records), rec.Path, f.apiErr(err))
		}
		if res.Duplicate {
			dups++
		} else {
			added++
		}
		last = res
	}
	fmt.Fprintf(c.stdout, "put %d records of %s (rev %s): %d new, %d already in\n", len(rp.Records), rp.DID, rp.Rev, added, dups)
	if last.Seq > 0 {
		fmt.Fprintf(c.stdout, "signed through seq=%d hash=%s\n", last.Seq, last.Hash)
	}
	return nil
}

const tailLong = `Follows the chain: one line per commit as this device applies it (seq, epoch, signer,
hash, ops), until Ctrl-C. Starts at the current head, or at --from SEQ. --json prints
the API's NDJSON lines (as ` + "`baton export`" + `). When the node stops answering (a
restart, a failover drill) tail says so on stderr and reconnects with backoff (up to
10 s between attempts), resuming after the last commit it printed; --no-reconnect
exits instead (status 1).`

const exportLong = `Writes the applied chain from --from (default 1) to the current head as NDJSON, one
commit a line: {seq, hash (hex), epoch, signer, cbor (base64 of the signed encoding)}.
Check it anywhere with ` + "`baton verify --chain DID chain.ndjson`" + `.
On an atproto chain (` + "`baton init --new-chain --format atproto`" + `), --car writes the whole
repository at the head as a CAR file instead, after replaying and checking every commit
(signature, links, prevData, rev order, the recomputed MST root): any replica gives the
same bytes, and atproto software (indigo's LoadRepoFromCAR) reads it.`

func (c *cli) tailCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "tail [--from SEQ] [--json]", Short: "follow commits as they are applied, one line each",
		Long: tailLong, Example: "  baton tail --data /tmp/b1\n  baton tail --data /tmp/b1 --from 1 --json", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 0, "")
	from := cmd.Flags().Uint64("from", 0, "first `seq` (default: the current head)")
	asJSON := cmd.Flags().Bool("json", false, "print NDJSON lines instead of text")
	noReconnect := cmd.Flags().Bool("no-reconnect", false, "exit when the node stops answering instead of reconnecting")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if *noReconnect {
			return c.streamCommits(cmd, f, *from, *asJSON, true)
		}
		return c.tailReconnecting(cmd, f, *from, *asJSON)
	}
	return cmd
}

// tailReconnecting follows the chain across the node's restarts: after a lost
// stream it resumes after the last seq it printed.
func (c *cli) tailReconnecting(cmd *cobra.Command, f *apiFlags, from uint64, asJSON bool) error {
	ctx := cmd.Context()
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	r := &reconnector{c: c, name: "tail"}
	enc := json.NewEncoder(c.stdout)
	next := from
	for {
		if next == 0 {
			st, err := cl.State(ctx)
			if err != nil {
				if r.down && r.again(ctx, err) {
					continue
				}
				if ctx.Err() != nil {
					return nil
				}
				return f.apiErr(err)
			}
			next = max(st.Head.Seq, 1)
		}
		var lost error
		for ac := range cl.Commits(ctx, next, true) {
			if ac.Err != nil {
				lost = ac.Err
				break
			}
			r.connected(fmt.Sprintf(" at seq %d", ac.Seq))
			next = ac.Seq + 1
			if asJSON {
				if err := enc.Encode(api.CommitJSON{Seq: ac.Seq, Hash: hex.EncodeToString(ac.Hash[:]), Epoch: ac.Epoch, Signer: ac.Signer, CBOR: ac.Raw}); err != nil {
					return err
				}
				continue
			}
			fmt.Fprintln(c.stdout, commitLine(ac))
		}
		if ctx.Err() != nil {
			return nil // Ctrl-C ends a tail normally
		}
		if lost == nil {
			lost = errors.New("the stream ended")
		}
		if !r.again(ctx, lost) {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("the node stopped answering: %w", f.apiErr(lost))
		}
	}
}

func (c *cli) exportCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "export [--from SEQ] > chain.ndjson", Short: "write the chain as NDJSON (verify it with `baton verify`)",
		Long: exportLong, Example: "  baton export --data /tmp/b1 > chain.ndjson\n  baton export --data /tmp/b1 | baton verify --data /tmp/b1", Args: noArgs}
	f := c.addAPIFlags(cmd.Flags(), 10*time.Minute, "the export")
	from := cmd.Flags().Uint64("from", 0, "first `seq` (default 1)")
	car := addCARFlags(cmd) // cmd_export_car.go
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if car.on {
			return c.exportCAR(cmd, f, car)
		}
		return c.streamCommits(cmd, f, *from, true, false)
	}
	return cmd
}

func (c *cli) streamCommits(cmd *cobra.Command, f *apiFlags, from uint64, asJSON, follow bool) error {
	ctx := cmd.Context()
	cl, err := f.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	sctx, cancel := f.ctx(ctx)
	defer cancel()
	start := from
	if follow && start == 0 {
		st, err := cl.State(sctx)
		if err != nil {
			return f.apiErr(err)
		}
		start = max(st.Head.Seq, 1)
	}
	enc := json.NewEncoder(c.stdout)
	n := 0
	for ac := range cl.Commits(sctx, start, follow) {
		if ac.Err != nil {
			return f.apiErr(ac.Err)
		}
		n++
		if asJSON {
			if err := enc.Encode(api.CommitJSON{Seq: ac.Seq, Hash: hex.EncodeToString(ac.Hash[:]), Epoch: ac.Epoch, Signer: ac.Signer, CBOR: ac.Raw}); err != nil {
				return err
			}
			continue
		}
		fmt.Fprintln(c.stdout, commitLine(ac))
	}
	if ctx.Err() != nil && follow {
		return nil // Ctrl-C ends a tail normally
	}
	if !follow && n == 0 && from <= 1 {
		fmt.Fprintln(c.stderr, "(the chain is empty)")
	}
	return f.apiErr(sctx.Err())
}

func commitLine(ac signer.AppliedCommit) string {
	c, err := signer.DecodeCommit(ac.Raw)
	if err != nil {
		return fmt.Sprintf("seq %d  UNDECODABLE: %v", ac.Seq, err)
	}
	var paths []string
	for i, op := range c.Ops {
		if i == 3 {
			paths = append(paths, fmt.Sprintf("+%d more", len(c.Ops)-3))
			break
		}
		paths = append(paths, op.Kind.String()+" "+op.Path)
	}
	return fmt.Sprintf("%s  seq %-6d epoch %-3d signer %s  hash %x  %d ops: %s",
		time.UnixMilli(c.Time).Format("15:04:05.000"), c.Seq, c.Epoch, shortPeer(c.Signer), ac.Hash[:6], len(c.Ops), strings.Join(paths, ", "))
}

// cleanText is api.Message for a string.
func cleanText(s string) string { return api.Message(fmt.Errorf("%s", s)) }
