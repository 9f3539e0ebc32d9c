package console

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
)

// Cookie names. The session cookie is scoped to /ui/; the sign-in
// cookie, which carries the sign-in form's CSRF token before there is a
// session, to the sign-in page.
const (
	sessionCookie = "hookstamp_session"
	loginCookie   = "hookstamp_login"
	loginTTL      = 30 * time.Minute
)

// loginData is the sign-in page.
type loginData struct {
	CSRF   string
	Failed bool
	Wait   int // seconds, when the address is slowed down
	Notice string
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.session(r); ok {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	d := loginData{CSRF: c.loginCSRF(w, r)}
	if r.URL.Query().Get("signed_out") != "" {
		d.Notice = "You are signed out."
	}
	c.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: d})
}

// secure reports whether the console's cookies are to be sent over HTTPS
// only: the request came over TLS, or admin.secure_cookies says a proxy
// in front serves HTTPS.
func (c *Console) secure(r *http.Request) bool {
	return r.TLS != nil || c.o.SecureCookies
}

// loginCSRF returns the sign-in form's token, set in its cookie when the
// browser has none yet.
func (c *Console) loginCSRF(w http.ResponseWriter, r *http.Request) string {
	if ck, err := r.Cookie(loginCookie); err == nil && len(ck.Value) >= 32 {
		return ck.Value
	}
	tok := randomToken()
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: tok, Path: "/ui/login", MaxAge: int(loginTTL / time.Second),
		HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
	return tok
}

// login checks the token. A wrong one gets the same answer whatever is
// wrong with it; an address that keeps sending wrong ones is made to
// wait (throttle) before its token is even looked at.
func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	ck, err := r.Cookie(loginCookie)
	if err != nil || !equal(ck.Value, r.PostFormValue("csrf")) {
		c.fail(w, r, nil, http.StatusForbidden, "The sign-in form has expired. Open the sign-in page again.")
		return
	}
	addr := r.RemoteAddr
	if wait := c.throttle.Try(addr); wait > 0 {
		secs := int(math.Ceil(wait.Seconds()))
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Sign in", Data: loginData{CSRF: ck.Value, Wait: secs}})
		return
	}
	got := digest(r.PostFormValue("token"))
	if subtle.ConstantTimeCompare(got[:], c.token[:]) != 1 {
		c.o.Logger.WarnContext(r.Context(), "console: sign-in refused", "remote", addr)
		c.render(w, r, http.StatusUnauthorized, "login", page{Title: "Sign in", Data: loginData{CSRF: ck.Value, Failed: true}})
		return
	}
	c.throttle.Succeeded(addr)
	// A new session at every sign-in: an id planted before it is never
	// promoted.
	if old, err := r.Cookie(sessionCookie); err == nil {
		c.sessions.drop(old.Value)
	}
	id, sess := c.sessions.create()
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/ui/", Expires: sess.expires,
		MaxAge: int(c.o.SessionTTL / time.Second), HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Path: "/ui/login", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
	c.o.Logger.InfoContext(r.Context(), "console: signed in", "remote", addr)
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, _ *session) {
	if ck, err := r.Cookie(sessionCookie); err == nil {
		c.sessions.drop(ck.Value)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Path: "/ui/", MaxAge: -1, HttpOnly: true, Secure: c.secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/ui/login?signed_out=1", http.StatusSeeOther)
}

// session returns r's live session.
func (c *Console) session(r *http.Request) (*session, bool) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil, false
	}
	s, ok := c.sessions.get(ck.Value)
	return &s, ok
}

// signedIn serves h to a signed-in browser; others are sent to sign in.
// A POST must also carry the session's CSRF token and come from this
// origin.
func (c *Console) signedIn(h func(http.ResponseWriter, *http.Request, *session)) http.Handler {
	inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, ok := c.session(r)
		if !ok {
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				c.fail(w, r, nil, http.StatusUnauthorized, "Your session has ended. Sign in again, then repeat the action.")
				return
			}
			http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			if err := r.ParseForm(); err != nil {
				if _, large := errors.AsType[*http.MaxBytesError](err); large {
					c.fail(w, r, s, http.StatusRequestEntityTooLarge, "The form is larger than the console takes (1 MiB): a recorded answer must be smaller.")
					return
				}
				c.fail(w, r, s, http.StatusBadRequest, "The form could not be read. Reload the page and try again.")
				return
			}
		}
		if r.Method == http.MethodPost && !equal(s.csrf, r.PostFormValue("csrf")) {
			c.fail(w, r, s, http.StatusForbidden, "The form has expired or did not come from this console. Reload the page and try again.")
			return
		}
		h(w, r, s)
	})
	return c.postOnly(inner)
}

// postOnly refuses a POST a browser says comes from another origin, with
// the console's error page, and bounds form bodies.
func (c *Console) postOnly(h http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.o.Logger.WarnContext(r.Context(), "console: a browser's POST from another origin refused", "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		c.fail(w, r, nil, http.StatusForbidden, "The form did not come from this console, your browser says: nothing was done. Open the console at its own address and try again.")
	}))
	return cop.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		}
		h.ServeHTTP(w, r)
	}))
}

// maxForm bounds a form (a resolve's recorded body is the largest).
const maxForm = 1 << 20

// equal compares secrets in constant time; an empty one never matches.
func equal(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// waitText says how long to wait, for people.
func waitText(secs int) string {
	if secs == 1 {
		return "1 second"
	}
	if secs < 120 {
		return fmt.Sprintf("%d seconds", secs)
	}
	return fmt.Sprintf("%d minutes", (secs+59)/60)
}
