package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/certmagic"

	"github.com/hookstamp/hookstamp/internal/admin"
	"github.com/hookstamp/hookstamp/internal/config"
	"github.com/hookstamp/hookstamp/internal/tlscert"
	"github.com/hookstamp/hookstamp/internal/tlscert/pgstorage"
)

// tlsParts are the delivery listener's certificate and the plain-HTTP
// redirect listener (server.tls, server.redirect_listen).
type tlsParts struct {
	mgr      *tlscert.Manager // nil: plain HTTP
	redirect *http.Server
	ln       net.Listener // the redirect listener
}

// initTLS builds the certificate manager when server.tls is set, and
// returns the delivery listener's TLS configuration (nil = plain HTTP).
func (g *Gateway) initTLS(ctx context.Context, o Options) (*tls.Config, error) {
	t := g.cfg.Server.TLS
	if !t.Enabled() {
		return nil, nil
	}
	to := tlscert.Options{
		CertFile:       t.CertFile,
		KeyFile:        t.KeyFile,
		ReloadInterval: o.TLSReloadInterval,
		MinVersion:     config.TLSVersion(t.MinVersion),
		Logger:         g.log,
		Now:            g.now,
	}
	if t.ACME.Enabled() {
		a, err := g.acmeOptions(ctx, o)
		if err != nil {
			return nil, err
		}
		to.ACME = a
	}
	m, err := tlscert.New(to)
	if err != nil {
		return nil, err
	}
	g.tls.mgr = m
	g.closers = append(g.closers, func() error { m.Close(); return nil })
	g.tel.ObserveCertificates(m.Expiry, g.now)
	return m.TLSConfig(), nil
}

func (g *Gateway) acmeOptions(ctx context.Context, o Options) (*tlscert.ACME, error) {
	a := g.cfg.Server.TLS.ACME
	storage, err := g.acmeStorage(ctx)
	if err != nil {
		return nil, err
	}
	return &tlscert.ACME{
		Domains:            a.Domains,
		Email:              a.Email,
		CA:                 a.CA,
		Storage:            storage,
		TrustedRoots:       o.ACMERoots,
		RenewCheckInterval: o.ACMERenewCheck,
	}, nil
}

// acmeStorage keeps the ACME account and certificates in the ledger's
// PostgreSQL database, shared by every replica, or with SQLite in the
// directory "acme" beside the database file.
func (g *Gateway) acmeStorage(ctx context.Context) (certmagic.Storage, error) {
	if g.cfg.Store.Driver != config.StorePostgres {
		return &certmagic.FileStorage{Path: acmeDir(g.cfg.Store.DSN)}, nil
	}
	s, err := pgstorage.Open(pgstorage.Options{DSN: g.cfg.Store.DSN, Logger: g.log})
	if err != nil {
		return nil, err
	}
	g.closers = append(g.closers, s.Close)
	if g.cfg.Store.AutoMigrate {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// MigrateTLS creates the TLS storage tables when server.tls.acme keeps
// its certificates in PostgreSQL (gateway migrate).
func MigrateTLS(ctx context.Context, cfg *config.Config) error {
	if !cfg.Server.TLS.ACME.Enabled() || cfg.Store.Driver != config.StorePostgres {
		return nil
	}
	s, err := pgstorage.Open(pgstorage.Options{DSN: cfg.Store.DSN})
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Migrate(ctx)
}

// acmeDir is the directory "acme" beside a SQLite file DSN, or in the
// working directory for an in-memory database.
func acmeDir(dsn string) string {
	path, _, _ := strings.Cut(strings.TrimPrefix(dsn, "file:"), "?")
	if path == "" || path == ":memory:" || strings.Contains(dsn, "mode=memory") {
		return "acme"
	}
	return filepath.Join(filepath.Dir(path), "acme")
}

// startTLS serves server.redirect_listen, then starts reloading the
// certificate files or obtaining the ACME certificates: the delivery
// listener is bound by then, and answers TLS-ALPN-01 challenges.
func (g *Gateway) startTLS(ctx context.Context) error {
	if g.tls.mgr == nil {
		return nil
	}
	if addr := g.cfg.Server.RedirectListen; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("server.redirect_listen %s: %w", addr, err)
		}
		_, httpsPort := splitPort(g.ln.Addr().String())
		srv := &http.Server{
			Handler:           g.tls.mgr.RedirectHandler(httpsPort),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       time.Minute,
		}
		g.tls.ln, g.tls.redirect = ln, srv
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				g.log.Error("redirect listener stopped", "err", err)
			}
		}()
		g.closers = append(g.closers, func() error {
			sctx, cancel := context.WithTimeout(context.Background(), adminCloseTimeout)
			defer cancel()
			return srv.Shutdown(sctx)
		})
		g.log.Info("redirect listener serving", "addr", ln.Addr().String())
	}
	return g.tls.mgr.Start(ctx, tlscert.Listeners{TLS: g.Addr(), Redirect: g.RedirectAddr()})
}

// tlsCheck is the /readyz member "tls": not ready while the delivery
// listener has no usable certificate.
func (g *Gateway) tlsCheck() []admin.Check {
	if g.tls.mgr == nil {
		return nil
	}
	return []admin.Check{{Name: "tls", Ping: g.tls.mgr.Ready, Show: true}}
}

// RedirectAddr is the address of the redirect listener ("" when off).
func (g *Gateway) RedirectAddr() string {
	if g.tls.ln == nil {
		return ""
	}
	return g.tls.ln.Addr().String()
}

func splitPort(addr string) (host string, port int) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0
	}
	n, _ := strconv.Atoi(p)
	return h, n
}
