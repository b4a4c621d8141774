package intentlog

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestValidateIntent: the one validation shared by the apply, the API and the node
// names the rule that failed, with the same Reason the apply counts.
func TestValidateIntent(t *testing.T) {
	long := func(n int) string { return strings.Repeat("x", n) }
	cases := []struct {
		name string
		in   Intent
		want Reason
		msg  string // substring of the message
	}{
		{"ok put", put("id-1", "app.bsky.feed.post/3k", "v"), "", ""},
		{"ok del", del("id-1", "c/r"), "", ""},
		{"ok empty value", Intent{ID: "i", Op: OpPut, Path: "c/r", Value: []byte{}}, "", ""},
		{"ok dots inside segment", put("i", "c/..x", "v"), "", ""},
		{"ok unicode id", put("idé-✓", "c/r", "v"), "", ""},
		{"empty id", put("", "c/r", "v"), ReasonBadIntent, "id is empty"},
		{"id not utf8", put("a\xff", "c/r", "v"), ReasonBadIntent, "not valid UTF-8"},
		{"id newline", put("a\nb", "c/r", "v"), ReasonBadIntent, "control character U+000A"},
		{"id nul", put("a\x00", "c/r", "v"), ReasonBadIntent, "control character U+0000"},
		{"id DEL", put("a\x7f", "c/r", "v"), ReasonBadIntent, "control character U+007F"},
		{"id C1 control", put("a\u0085", "c/r", "v"), ReasonBadIntent, "control character U+0085"},
		{"id too long", put(long(MaxIDLen+1), "c/r", "v"), ReasonTooLarge, "id longer than 256 bytes"},
		{"id at limit", put(long(MaxIDLen), "c/r", "v"), "", ""},
		{"unknown op", Intent{ID: "i", Op: 7, Path: "c/r"}, ReasonBadIntent, "unknown op 7"},
		{"zero op", Intent{ID: "i", Path: "c/r"}, ReasonBadIntent, "unknown op 0"},
		{"value on del", Intent{ID: "i", Op: OpDel, Path: "c/r", Value: []byte("x")}, ReasonBadIntent, "value on a del"},
		{"no slash", put("i", "rkey", "v"), ReasonBadPath, `path "rkey" is not collection/rkey`},
		{"reserved", put("i", "__lease__", "v"), ReasonBadPath, "not collection/rkey"},
		{"leading slash", put("i", "/c/r", "v"), ReasonBadPath, "not collection/rkey"},
		{"trailing slash", put("i", "c/r/", "v"), ReasonBadPath, "not collection/rkey"},
		{"empty segment", put("i", "c//r", "v"), ReasonBadPath, "not collection/rkey"},
		{"space", put("i", "c/r x", "v"), ReasonBadPath, "not collection/rkey"},
		{"control in path", put("i", "c/r\n", "v"), ReasonBadPath, `path "c/r\n"`},
		{"dot segment", put("i", "c/.", "v"), ReasonBadPath, "no . or .. segments"},
		{"dotdot segment", put("i", "c/../r", "v"), ReasonBadPath, "no . or .. segments"},
		{"dot collection", put("i", "./r", "v"), ReasonBadPath, "not collection/rkey"},
		{"path too long", put("i", "c/"+long(MaxPathLen), "v"), ReasonTooLarge, "path longer than 512 bytes"},
		{"value too long", put("i", "c/r", long(MaxValueLen+1)), ReasonTooLarge, "value longer than 1048576 bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateIntent(tc.in)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ValidateIntent = %v, want nil", err)
				}
				return
			}
			var ie *IntentError
			if !errors.As(err, &ie) {
				t.Fatalf("ValidateIntent = %v (%T), want *IntentError", err, err)
			}
			if ie.Reason != tc.want {
				t.Errorf("reason %q, want %q", ie.Reason, tc.want)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("message %q does not say %q", err.Error(), tc.msg)
			}
			if ie.Msg == "" || err.Error() != ie.Msg {
				t.Errorf("Error() %q, Msg %q", err.Error(), ie.Msg)
			}
		})
	}
}

// The apply refuses what ValidateIntent refuses, with its reason, and accepts the rest.
func TestApplyUsesValidateIntent(t *testing.T) {
	for _, in := range []Intent{
		put("a\tb", "c/r", "v"), put("i", "c/..", "v"), put("i", "../c", "v"), put("i", "c/./r", "v"),
		put("ok", "c/r", "v"), del("ok2", "c/r"),
	} {
		h := newHarness(t)
		res := h.apply(one(in))
		err := ValidateIntent(in)
		if err == nil {
			if !res.Accepted {
				t.Errorf("%+v: valid but rejected %s", in, res.Reason)
			}
			continue
		}
		var ie *IntentError
		errors.As(err, &ie)
		if res.Accepted || res.Intents[0].Reason != ie.Reason {
			t.Errorf("%+v: apply %+v, ValidateIntent %v", in, res.Intents[0], err)
		}
	}
}

// CheckLeaseTTL: a TTL of at most 1/16 of the retention (0: the default 24 h) passes;
// one over it is refused with both values, the bound, and what to do.
func TestCheckLeaseTTL(t *testing.T) {
	day := DefaultRetention * time.Millisecond
	for _, ok := range []struct{ ttl, retention time.Duration }{
		{15 * time.Second, 0}, {day / 16, 0}, {day / 16, day}, {time.Second, 16 * time.Second}, {time.Millisecond, 16 * time.Millisecond},
	} {
		if err := CheckLeaseTTL(ok.ttl, ok.retention); err != nil {
			t.Errorf("ttl %s, retention %s: %v", ok.ttl, ok.retention, err)
		}
	}
	for _, bad := range []struct{ ttl, retention time.Duration }{
		{day/16 + time.Millisecond, 0}, {day, day}, {time.Second, 12 * time.Second}, {1 << 62, time.Hour},
	} {
		err := CheckLeaseTTL(bad.ttl, bad.retention)
		if !errors.Is(err, ErrTTLOverRetention) {
			t.Fatalf("ttl %s, retention %s: %v", bad.ttl, bad.retention, err)
		}
		r := bad.retention
		if r == 0 {
			r = day
		}
		for _, s := range []string{bad.ttl.String(), r.String(), (r / StepsPerRetention).String(), "--ttl"} {
			if !strings.Contains(err.Error(), s) {
				t.Fatalf("the error does not name %s: %v", s, err)
			}
		}
	}
}
