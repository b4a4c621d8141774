package main

import (
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
				return doc.GenMan(root, header, c.stdout)
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			if err := doc.GenManTree(root, header, dir); err != nil {
				return err
			}
			n, _ := filepath.Glob(filepath.Join(dir, "baton*.1"))
			fmt.Fprintf(c.stderr, "wrote %d pages to %s\n", len(n), dir)
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "write one page per command into `DIR` instead of baton(1) to stdout")
	return cmd
}
