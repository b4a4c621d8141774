package node_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/chain"
	"github.com/batonhq/baton/signer/node"
	"github.com/batonhq/baton/transport"
)

// An embedder starts a node (here the first and only device of a new cluster),
// submits an intent, waits for it to be signed, and watches Lost: the hard signal
// that this device stopped holding the signing lease.
func Example() {
	dir, err := os.MkdirTemp("", "baton-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	psk, err := transport.GeneratePSK() // shared by every device of the cluster
	if err != nil {
		log.Fatal(err)
	}
	key, err := chain.GenerateKey(nil) // the chain key (chain.SaveKey/LoadKey keep it)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	n, err := node.Start(ctx, node.Config{
		DataDir:     dir,
		ListenAddrs: []string{"/ip4/127.0.0.1/tcp/0"},
		PSK:         psk,
		ChainKey:    key,
		Bootstrap:   true,
		TTL:         time.Second,
		Tick:        100 * time.Millisecond,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		log.Fatal(err)
	}

	res, err := n.Submit(ctx, intentlog.Intent{ID: "post-1", Op: intentlog.OpPut,
		Path: "app.bsky.feed.post/1", Value: []byte("hello")}, node.WaitSigned)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("signed at seq", res.Seq)

	lost := n.Lost() // fetch while holding: each hold has its own channel
	done := make(chan struct{})
	go func() {
		defer close(done)
		<-lost
		fmt.Println("lease lost: stop publishing as the signer")
	}()
	// A graceful stop releases the lease first, so a standby takes over at once.
	if err := n.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	<-done
	// Output:
	// signed at seq 1
	// lease lost: stop publishing as the signer
}
