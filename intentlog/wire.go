package intentlog

import (
	"encoding/binary"
	"fmt"
)

// wire.go holds the primitives shared by the entry codec, the result codec, the bbolt
// value encodings and the snapshot format: canonical uvarints and zigzag varints,
// length-prefixed byte strings, and a bounds-checked reader that never allocates more
// than the input it was given.

// maxField bounds any single length-prefixed field (defence in depth: a length can
// never exceed the remaining input anyway).
const maxField = 64 << 20

type wbuf struct{ b []byte }

func (w *wbuf) byte1(v byte)     { w.b = append(w.b, v) }
func (w *wbuf) uvarint(v uint64) { w.b = binary.AppendUvarint(w.b, v) }
func (w *wbuf) varint(v int64)   { w.b = binary.AppendVarint(w.b, v) }
func (w *wbuf) bytes(v []byte)   { w.uvarint(uint64(len(v))); w.b = append(w.b, v...) }
func (w *wbuf) str(v string)     { w.uvarint(uint64(len(v))); w.b = append(w.b, v...) }
func (w *wbuf) bool(v bool) {
	if v {
		w.byte1(1)
	} else {
		w.byte1(0)
	}
}

// optBytes writes a presence flag then the bytes, so nil and empty stay distinct.
func (w *wbuf) optBytes(v []byte) {
	if v == nil {
		w.byte1(0)
		return
	}
	w.byte1(1)
	w.bytes(v)
}

// rbuf reads what wbuf wrote. The first error sticks; later reads return zero values.
type rbuf struct {
	b   []byte
	err error
}

func (r *rbuf) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
	}
	r.b = nil
}

func (r *rbuf) byte1() byte {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 1 {
		r.fail("short input")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func (r *rbuf) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("bad uvarint")
		return 0
	}
	if n != uvarintLen(v) {
		r.fail("non-canonical uvarint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *rbuf) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.fail("bad varint")
		return 0
	}
	if n != len(binary.AppendVarint(nil, v)) {
		r.fail("non-canonical varint")
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *rbuf) bool() bool {
	switch r.byte1() {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail("bad bool")
	return false
}

// length reads a length prefix and checks it against the remaining input.
func (r *rbuf) length() int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if n > uint64(len(r.b)) || n > maxField {
		r.fail("length %d exceeds input", n)
		return 0
	}
	return int(n)
}

func (r *rbuf) bytes() []byte {
	n := r.length()
	if r.err != nil {
		return nil
	}
	v := make([]byte, n)
	copy(v, r.b[:n])
	r.b = r.b[n:]
	return v
}

func (r *rbuf) str() string {
	n := r.length()
	if r.err != nil {
		return ""
	}
	v := string(r.b[:n])
	r.b = r.b[n:]
	return v
}

// hash32 reads a fixed 32-byte hash.
func (r *rbuf) hash32() (h [32]byte) {
	if r.err != nil {
		return h
	}
	if len(r.b) < 32 {
		r.fail("short hash")
		return h
	}
	copy(h[:], r.b[:32])
	r.b = r.b[32:]
	return h
}

func (r *rbuf) optBytes() []byte {
	switch r.byte1() {
	case 0:
		return nil
	case 1:
		return r.bytes()
	}
	r.fail("bad presence flag")
	return nil
}

// count reads an element count; each element needs at least minSize bytes, so a count
// larger than the remaining input allows is rejected before anything is allocated.
func (r *rbuf) count(minSize int) int {
	n := r.uvarint()
	if r.err != nil {
		return 0
	}
	if minSize < 1 {
		minSize = 1
	}
	if n > uint64(len(r.b)/minSize) {
		r.fail("count %d exceeds input", n)
		return 0
	}
	return int(n)
}

// done reports an error unless every byte was consumed.
func (r *rbuf) done() error {
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	return r.err
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func u64key(v uint64) []byte {
	var k [8]byte
	binary.BigEndian.PutUint64(k[:], v)
	return k[:]
}

func keyU64(k []byte) uint64 {
	if len(k) != 8 {
		return 0
	}
	return binary.BigEndian.Uint64(k)
}

// optNonce reads a nonce written only when set, as the last field: 0 when no bytes are
// left; a nonce written as 0 is not canonical.
func (r *rbuf) optNonce() uint64 {
	if r.err != nil || len(r.b) == 0 {
		return 0
	}
	n := r.uvarint()
	if r.err == nil && n == 0 {
		r.fail("nonce present but 0")
	}
	return n
}
