package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

const manLong = `Writes baton's manual pages, generated from the same definitions as the help and the
shell completion. Without --dir, prints baton(1) (the commands and the common rules) to
stdout; with --dir, writes one page per command there (baton.1, baton-status.1,
baton-lease-transfer.1, ...).`

const manExample = `  baton man | man -l -
  baton man --dir /usr/local/share/man/man1 && mandb`

func (c *cli) manCmd() *cobra.Command {
	var dir string
	cmd := &cobra.Command{
		Use:     "man [--dir DIR]",
		Short:   "write the manual pages (roff), generated from the command definitions",
		Long:    manLong,
		Example: manExample,
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			root := cmd.Root()
			root.DisableAutoGenTag = true
			// A fixed date keeps the pages reproducible from one build to the next.
			date := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			header := &doc.GenManHeader{Title: "BATON", Section: "1", Source: "baton " + readBuildInfo().Version,
				Manual: "baton manual", Date: &date}
			if dir == "" {
				var b bytes.Buffer
				if err := doc.GenMan(root, header, &b); err != nil {
					return err
				}
				_, err := c.stdout.Write(withManSections(b.Bytes()))
				return err
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := doc.GenManTree(root, header, dir); err != nil {
				return err
			}
			n, _ := filepath.Glob(filepath.Join(dir, "baton*.1"))
			for _, p := range n {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				if err := os.WriteFile(p, withManSections(b), 0o644); err != nil {
					return err
				}
			}
			fmt.Fprintf(c.stderr, "wrote %d pages to %s\n", len(n), dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "write one page per command into `DIR` instead of baton(1) to stdout")
	return cmd
}

// manSections are the sections every page carries beyond what cobra generates.
const manSections = `.SH EXIT STATUS
.TP
0
success (for \fBrun\fP and \fBjoin\fP: the node stopped on a signal, or this device left its cluster)
.TP
1
failure; the reason is one line on stderr
.TP
2
usage error (an unknown flag, a bad value, a missing argument)
.TP
3
\fBrun\fP, \fBjoin\fP: this device was removed from its cluster by another member (also when it learns so from a member after being removed while it was down); do not restart it from the same data dir (the systemd unit has RestartPreventExitStatus=3 4)
.TP
4
\fBrun\fP, \fBjoin\fP: the members found another process running with this device's identity (identity.key), started earlier: this one is a clone (a data dir copied or started beside its original, a cloned machine) and signed nothing; do not restart it from this data dir: \fBbaton init\fP a new device and join it
.TP
130
interrupted (Ctrl-C) while waiting
.PP
\fBexec\fP exits with CMD's own status when CMD ends by itself, 1 when the hold ended under it, 130 when interrupted; it releases the lease when CMD ends by itself or it is interrupted, unless \fB--keep-lease\fP.
.SH ENVIRONMENT
.TP
BATON_<FLAG>
every flag, e.g. BATON_DATA, BATON_LISTEN, BATON_TTL (dashes become underscores); a flag on the command line wins
.TP
BATON_DATA
the data dir (default ~/.baton; as root, when ~/.baton does not exist and /var/lib/baton/data holds a device, /var/lib/baton/data, the packaged service's)
.TP
BATON_API_TOKEN
the bearer token for a TCP \fB--api\fP (secrets never go in argv)
.SH FILES
.TP
~/.baton, /var/lib/baton/data
the data dir: identity.key (this device's libp2p key), network.key, chain.key (absent on a replica), device.json, raft.db (the Raft log), state.db (the applied state), members.json (members' addresses), removed-members.json (members removed while this device was one), removed.json (this device left or was removed), baton.sock (the API socket), baton.lock, api.token
.TP
/etc/default/baton
the packaged service's settings, as BATON_<FLAG>=value
.TP
/etc/systemd/system/baton.service
the packaged systemd unit (deploy/systemd)
`

// withManSections inserts manSections before SEE ALSO (or at the end).
func withManSections(page []byte) []byte {
	if i := bytes.Index(page, []byte(".SH SEE ALSO")); i >= 0 {
		return append(append(append([]byte{}, page[:i]...), manSections...), page[i:]...)
	}
	return append(page, manSections...)
}
