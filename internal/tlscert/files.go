package tlscert

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"
)

// fileSource serves the certificate of two PEM files and reads them again
// every interval. A pair that does not load (half written, corrupt, a key
// that is not the certificate's) twice in a row is logged once, and the
// one served so far is kept; new connections get a new pair as soon as it loads.
type fileSource struct {
	certFile, keyFile string
	interval          time.Duration
	log               *slog.Logger

	cert       atomic.Pointer[tls.Certificate]
	last       [sha256.Size]byte // digest of the files last loaded, or given up on
	failing    [sha256.Size]byte // digest of the files that last failed to load
	unreadable int               // consecutive reads that failed
}

func newFileSource(certFile, keyFile string, interval time.Duration, log *slog.Logger) (*fileSource, error) {
	if interval <= 0 {
		interval = time.Second
	}
	s := &fileSource{certFile: certFile, keyFile: keyFile, interval: interval, log: log}
	certPEM, keyPEM, err := s.read()
	if err != nil {
		return nil, err
	}
	c, err := parsePair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("server.tls: %s and %s: %w", certFile, keyFile, err)
	}
	s.last = digest(certPEM, keyPEM)
	s.cert.Store(c)
	log.Info("tls certificate loaded", "cert_file", certFile, "names", leafNames(c.Leaf), "not_after", c.Leaf.NotAfter)
	return s, nil
}

func (s *fileSource) current() *tls.Certificate { return s.cert.Load() }

func (s *fileSource) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return s.cert.Load(), nil
}

func (s *fileSource) watch(ctx context.Context) {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.reload()
	}
}

// reload loads the files when their content has changed since last time.
func (s *fileSource) reload() {
	certPEM, keyPEM, err := s.read()
	if err != nil {
		// A file being replaced may be missing for an instant: tried
		// again next time, and logged only once it stays so.
		if s.unreadable++; s.unreadable == 2 {
			s.log.Warn("tls certificate files unreadable; still serving the previous certificate", "err", err)
		}
		return
	}
	s.unreadable = 0
	d := digest(certPEM, keyPEM)
	if d == s.last {
		return
	}
	c, err := parsePair(certPEM, keyPEM)
	if err != nil {
		// A pair replaced file by file does not match for an instant:
		// logged, and no longer tried, once the next look finds it so.
		if d == s.failing {
			s.last = d
			s.log.Error("tls certificate files changed but do not load; still serving the previous certificate",
				"cert_file", s.certFile, "key_file", s.keyFile, "err", err)
		}
		s.failing = d
		return
	}
	s.last = d
	s.cert.Store(c)
	s.log.Info("tls certificate reloaded", "cert_file", s.certFile, "names", leafNames(c.Leaf), "not_after", c.Leaf.NotAfter)
}

func (s *fileSource) read() (certPEM, keyPEM []byte, err error) {
	if certPEM, err = os.ReadFile(s.certFile); err != nil {
		return nil, nil, fmt.Errorf("server.tls.cert_file: %w", err)
	}
	if keyPEM, err = os.ReadFile(s.keyFile); err != nil {
		return nil, nil, fmt.Errorf("server.tls.key_file: %w", err)
	}
	return certPEM, keyPEM, nil
}

func parsePair(certPEM, keyPEM []byte) (*tls.Certificate, error) {
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return nil, err
		}
	}
	return &c, nil
}

func digest(certPEM, keyPEM []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(certPEM)
	h.Write([]byte{0})
	h.Write(keyPEM)
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
