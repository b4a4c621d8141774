package transport

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"strings"

	"github.com/libp2p/go-libp2p/core/pnet"
)

// PSKSize is the length of a private network key in bytes.
const PSKSize = 32

// pskHeader is the first two lines of the standard swarm key file format.
const pskHeader = "/key/swarm/psk/1.0.0/\n/base64/\n"

// GeneratePSK returns a new random 32-byte private network key.
func GeneratePSK() (pnet.PSK, error) {
	k := make([]byte, PSKSize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate psk: %w", err)
	}
	return k, nil
}

// EncodePSK returns the key in the standard swarm key file format
// ("/key/swarm/psk/1.0.0/", "/base64/", the key), newline terminated.
func EncodePSK(psk pnet.PSK) ([]byte, error) {
	if len(psk) != PSKSize {
		return nil, ErrNoPSK
	}
	return []byte(pskHeader + base64.StdEncoding.EncodeToString(psk) + "\n"), nil
}

// DecodePSK parses a key in the swarm key file format (base16, base64 or bin), or a
// bare base64 string of 32 bytes (the one-liner form, e.g. from an environment
// variable).
func DecodePSK(b []byte) (pnet.PSK, error) {
	if bytes.HasPrefix(b, []byte("/key/swarm/psk/1.0.0/")) {
		k, err := pnet.DecodeV1PSK(bytes.NewReader(b))
		if err != nil {
			return nil, fmt.Errorf("decode psk: %w", err)
		}
		return k, nil
	}
	k, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(b)))
	if err != nil {
		return nil, fmt.Errorf("decode psk: not a swarm key file nor base64: %w", err)
	}
	if len(k) != PSKSize {
		return nil, fmt.Errorf("decode psk: %d bytes: %w", len(k), ErrNoPSK)
	}
	return k, nil
}

// ReadPSKFile reads a key file written by WritePSKFile (or any swarm.key).
func ReadPSKFile(path string) (pnet.PSK, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read psk: %w", err)
	}
	return DecodePSK(b)
}

// WritePSKFile writes the key in the swarm key file format with mode 0600, atomically.
func WritePSKFile(path string, psk pnet.PSK) error {
	b, err := EncodePSK(psk)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, b, 0o600)
}
