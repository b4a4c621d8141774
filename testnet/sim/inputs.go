package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/batonhq/baton/intentlog"
	"github.com/batonhq/baton/signer/node"
)

// Odd clients (issue 19.6): besides the ordinary clients, a profile may run clients
// that send every kind of input the API accepts, including the ones the apply
// refuses. A valid odd input is submitted until acknowledged, like any other; an
// input the apply refuses must be refused at once at the entrance, with the apply's
// reason, and never acknowledged (VOddInput); it must never reach a commit (the
// refusal invariants of check_refused.go).

// oddKind is one kind of input: make builds it from a unique token; reason is the
// apply's reason for it ("" when valid).
type oddKind struct {
	name   string
	make   func(tok string) intentlog.Intent
	reason intentlog.Reason
}

var oddKinds = []oddKind{
	// Valid, but not what the ordinary clients send.
	{"del", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpDel, Path: "app.sim/gone-" + t}
	}, ""},
	{"empty-value", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpPut, Path: "app.sim/e-" + t, Value: []byte{}}
	}, ""},
	{"unicode-id", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-é 𝄞 " + t, Op: intentlog.OpPut, Path: "app.sim/u-" + t, Value: []byte("v")}
	}, ""},
	{"max-id", func(t string) intentlog.Intent {
		id := "o-" + t + "-"
		return intentlog.Intent{ID: id + strings.Repeat("m", intentlog.MaxIDLen-len(id)), Op: intentlog.OpPut, Path: "app.sim/m-" + t}
	}, ""},
	{"max-path", func(t string) intentlog.Intent {
		p := "app.sim/p-" + t + "-"
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpPut, Path: p + strings.Repeat("p", intentlog.MaxPathLen-len(p))}
	}, ""},
	// Refused by the apply.
	{"control-id", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "bad\u0001" + t, Op: intentlog.OpPut, Path: "app/b", Value: []byte("hi")}
	}, intentlog.ReasonBadIntent},
	{"nul-id", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "bad\u0000" + t, Op: intentlog.OpPut, Path: "app/b", Value: []byte("hi")}
	}, intentlog.ReasonBadIntent},
	{"c1-id", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "bad\u0085" + t, Op: intentlog.OpPut, Path: "app/b"}
	}, intentlog.ReasonBadIntent},
	{"invalid-utf8-id", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "bad\xff" + t, Op: intentlog.OpPut, Path: "app/b"}
	}, intentlog.ReasonBadIntent},
	{"empty-id", func(t string) intentlog.Intent {
		return intentlog.Intent{Op: intentlog.OpPut, Path: "app/b"}
	}, intentlog.ReasonBadIntent},
	{"unknown-op", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.Op(9), Path: "app/b"}
	}, intentlog.ReasonBadIntent},
	{"value-on-del", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpDel, Path: "app/b", Value: []byte("x")}
	}, intentlog.ReasonBadIntent},
	{"dot-path", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpPut, Path: "app/../b"}
	}, intentlog.ReasonBadPath},
	{"flat-path", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpPut, Path: "appb"}
	}, intentlog.ReasonBadPath},
	{"long-id", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t + strings.Repeat("l", intentlog.MaxIDLen), Op: intentlog.OpPut, Path: "app/b"}
	}, intentlog.ReasonTooLarge},
	{"long-path", func(t string) intentlog.Intent {
		return intentlog.Intent{ID: "o-" + t, Op: intentlog.OpPut, Path: "app/" + strings.Repeat("p", intentlog.MaxPathLen)}
	}, intentlog.ReasonTooLarge},
}

// VOddInput: an input the apply refuses was not refused at the entrance with the
// apply's reason (acknowledged, or answered with another error).
const VOddInput = "odd_input"

// startOdd starts the profile's odd clients (called by startLoad's caller).
func (w *world) startOdd() {
	if w.cfg.atproto() {
		return // their valid inputs are not DAG-CBOR records (format.go)
	}
	for i := range w.prof.OddClients {
		w.loadWG.Add(1)
		go w.oddClient(i)
	}
}

func (w *world) oddClient(c int) {
	defer w.loadWG.Done()
	p := w.prof
	rng := w.clientRNG(0x0dd, c)
	for i := 0; ; i++ {
		think := p.Think
		if think <= 0 {
			think = 50 * time.Millisecond
		}
		time.Sleep(time.Duration(rng.ExpFloat64() * float64(4*think)))
		if w.loadStopped() {
			return
		}
		k := oddKinds[rng.IntN(len(oddKinds))]
		tok := fmt.Sprintf("%d-%d", c, i)
		in := k.make(tok)
		if k.reason == "" {
			w.submitIntent(rng, in, submitOpts{dev: -1, timeout: between(rng, p.Timeout)})
			continue
		}
		w.submitInvalid(rng, k, in)
	}
}

// submitInvalid submits an input the apply refuses to one device: it must be refused
// at once with the apply's reason.
func (w *world) submitInvalid(rng *rand.Rand, k oddKind, in intentlog.Intent) {
	dev := rng.IntN(w.cfg.Devices)
	n, _ := w.devs[dev].node()
	if n == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.TTL)
	_, err := n.Submit(ctx, in, node.WaitCommitted)
	cancel()
	want := map[intentlog.Reason]error{intentlog.ReasonBadIntent: node.ErrBadRequest,
		intentlog.ReasonBadPath: node.ErrBadPath, intentlog.ReasonTooLarge: node.ErrTooLarge}[k.reason]
	w.ev.add(dev, "odd", "%s %q: %v", k.name, in.ID, errText(err))
	switch {
	case err == nil:
		w.violation(VOddInput, dev, "%s %q (the apply refuses it: %s) was acknowledged", k.name, in.ID, k.reason)
	case !errors.Is(err, want):
		w.violation(VOddInput, dev, "%s %q (the apply refuses it: %s) answered %v, want %v", k.name, in.ID, k.reason, err, want)
	}
}
