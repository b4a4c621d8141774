// Command baton runs a baton device. The subcommands arrive with the node; until then it
// says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "baton: the command line is not built yet; see README.md for what works today")
	os.Exit(2)
}
