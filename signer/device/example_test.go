package device_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/batonhq/baton/signer/device"
	"github.com/batonhq/baton/signer/node"
)

// Join a cluster from a Go program with an invite printed by `baton invite` on a
// running device, as `baton join --invite-file invite.txt` does.
func ExampleJoin() {
	f, err := os.Open("invite.txt")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	inv, err := device.ReadInvite(f, "invite.txt")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := device.Join(ctx, "/var/lib/myapp/baton", inv, device.JoinOptions{
		Adjust: func(c *node.Config) { c.ListenAddrs = []string{"/ip4/0.0.0.0/tcp/7420"} },
	})
	if err != nil {
		fmt.Println(err) // nothing was kept in the data dir
		return
	}
	defer n.Stop(context.Background())
	hold, err := n.Campaign(ctx) // wait until this device holds the lease
	if err == nil {
		<-hold.Done() // the moment the hold ends
	}
}

// Start a device that `baton init` (or device.Create) initialized.
func ExampleOpen() {
	d, err := device.Open("/var/lib/myapp/baton")
	if err != nil {
		fmt.Println(err)
		return
	}
	cfg := d.Config()
	cfg.ListenAddrs = []string{"/ip4/0.0.0.0/tcp/7420"}
	n, err := node.Start(context.Background(), cfg)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Stop(context.Background())
	fmt.Println(n.ID() == d.ID.String())
}
