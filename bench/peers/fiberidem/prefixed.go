package fiberidem

import (
	"errors"
	"time"

	"github.com/gofiber/fiber/v2"
)

// prefixed keeps the middleware's keys under a prefix of the shared Redis
// server, which the storage itself cannot do.
type prefixed struct {
	s      fiber.Storage
	prefix string
}

var _ fiber.Storage = (*prefixed)(nil)

func (p *prefixed) Get(key string) ([]byte, error) { return p.s.Get(p.prefix + key) }

func (p *prefixed) Set(key string, val []byte, exp time.Duration) error {
	return p.s.Set(p.prefix+key, val, exp)
}

func (p *prefixed) Delete(key string) error { return p.s.Delete(p.prefix + key) }

// Reset would flush the whole database, other users' keys included.
func (p *prefixed) Reset() error { return errors.New("fiberidem: reset of a shared Redis refused") }

// Close is the App's, which owns the storage.
func (p *prefixed) Close() error { return nil }
