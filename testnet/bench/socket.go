package bench

import (
	"context"
	"sync"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/api"
	"github.com/batonhq/baton/signer/node"
)

// socketClients submits through the local API on a Unix socket, one api.Client
// (its own connections) per benchmark client, as separate client processes would.
type socketClients struct {
	path string
	mu   sync.Mutex
	cls  map[int]*api.Client
}

func newSocketClients(path string) *socketClients {
	return &socketClients{path: path, cls: map[int]*api.Client{}}
}

func (s *socketClients) client(i int) (*api.Client, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.cls[i]; ok {
		return c, nil
	}
	c, err := api.NewClient(s.path, "")
	if err != nil {
		return nil, err
	}
	s.cls[i] = c
	return c, nil
}

func (s *socketClients) submit(ctx context.Context, client int, id string, value []byte, wait node.Wait) error {
	c, err := s.client(client)
	if err != nil {
		return err
	}
	_, err = c.Submit(ctx, intentlog.Intent{ID: id, Op: intentlog.OpPut, Path: "bench/" + id, Value: value}, wait)
	return err
}

func (s *socketClients) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range s.cls {
		c.Close()
	}
}
