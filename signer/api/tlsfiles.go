package api

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/batonhq/baton/signer/node"
)

// TLSFromFiles returns a server TLS configuration for Config.TLS from a PEM
// certificate (chain) and key file. The files are read again when either changes
// (a renewal by certbot or an ACME client needs no restart); a renewal that cannot be
// read keeps the certificate served before.
func TLSFromFiles(certFile, keyFile string) (*tls.Config, error) {
	kp := &keyPairFiles{cert: certFile, key: keyFile}
	if _, err := kp.load(); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.get}, nil
}

type keyPairFiles struct {
	cert, key string

	mu      sync.Mutex
	current *tls.Certificate
	stamp   [2]time.Time // the files' modification times when current was read
}

func (k *keyPairFiles) stamps() ([2]time.Time, error) {
	var st [2]time.Time
	for i, p := range []string{k.cert, k.key} {
		fi, err := os.Stat(p)
		if err != nil {
			return st, err
		}
		st[i] = fi.ModTime()
	}
	return st, nil
}

// load reads the pair when it changed since it was last read.
func (k *keyPairFiles) load() (*tls.Certificate, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st, err := k.stamps()
	if err == nil && k.current != nil && st == k.stamp {
		return k.current, nil
	}
	if err != nil {
		if k.current != nil {
			return k.current, nil
		}
		return nil, fmt.Errorf("%w: tls certificate: %w", node.ErrBadConfig, err)
	}
	c, err := tls.LoadX509KeyPair(k.cert, k.key)
	if err != nil {
		if k.current != nil {
			return k.current, nil
		}
		return nil, fmt.Errorf("%w: tls certificate %s and key %s: %w", node.ErrBadConfig, k.cert, k.key, err)
	}
	k.current, k.stamp = &c, st
	return k.current, nil
}

func (k *keyPairFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) { return k.load() }

// LeafOfFiles is the certificate a TLSFromFiles configuration serves now (for
// Config.XRPCCertificate).
func LeafOfFiles(tc *tls.Config) func() (*x509.Certificate, error) {
	return func() (*x509.Certificate, error) {
		c, err := tc.GetCertificate(&tls.ClientHelloInfo{})
		if err != nil {
			return nil, err
		}
		if c.Leaf != nil {
			return c.Leaf, nil
		}
		return x509.ParseCertificate(c.Certificate[0])
	}
}
