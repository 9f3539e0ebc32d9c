package console

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// session is one signed-in browser.
type session struct {
	// csrf is the token every form of this session carries.
	csrf    string
	expires time.Time
}

// sessions are kept in memory, by the SHA-256 of the cookie's value: a
// lookup's timing depends on the digest, not on the secret.
type sessions struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[[32]byte]session
}

func newSessions(ttl time.Duration, now func() time.Time) *sessions {
	return &sessions{ttl: ttl, now: now, m: make(map[[32]byte]session)}
}

// create starts a session and returns the cookie value that names it.
func (s *sessions) create() (id string, sess session) {
	id, sess = randomToken(), session{csrf: randomToken(), expires: s.now().Add(s.ttl)}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	for k, v := range s.m {
		if !now.Before(v.expires) {
			delete(s.m, k)
		}
	}
	s.m[digest(id)] = sess
	return id, sess
}

// get returns the live session named by id.
func (s *sessions) get(id string) (session, bool) {
	k := digest(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	sess, ok := s.m[k]
	if ok && !s.now().Before(sess.expires) {
		delete(s.m, k)
		return session{}, false
	}
	return sess, ok
}

// drop ends the session named by id.
func (s *sessions) drop(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, digest(id))
}

func digest(s string) [32]byte { return sha256.Sum256([]byte(s)) }

// randomToken is 256 random bits, base64url.
func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it crashes the program instead)
	return base64.RawURLEncoding.EncodeToString(b)
}
