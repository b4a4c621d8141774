package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/batonhq/baton/signer/device"
)

// apiTokenFile is the TCP API's bearer token in the data dir (0600), made by `run`
// when it serves the API on TCP and the file does not exist yet.
const apiTokenFile = "api.token"

// readToken reads a bearer token file: one line, no group or world access.
func readToken(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("%s is readable by others (mode %v): chmod 600 it", path, fi.Mode().Perm())
	}
	b, err := device.ReadSmall(path, 4096)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" || strings.ContainsAny(tok, " \t\r\n") {
		return "", fmt.Errorf("%s: not a token (one line, no spaces)", path)
	}
	return tok, nil
}

// serverToken returns the TCP API's token from path, creating the file with a new
// random token when it does not exist (created reports that).
func serverToken(path string) (tok string, created bool, err error) {
	tok, err = readToken(path)
	if !errors.Is(err, fs.ErrNotExist) {
		return tok, false, err
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", false, err
	}
	tok = hex.EncodeToString(b[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", false, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("create %s: %w", path, err)
	}
	_, err = f.WriteString(tok + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", false, fmt.Errorf("write %s: %w", path, err)
	}
	return tok, true, nil
}
