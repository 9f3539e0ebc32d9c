package console

import (
	"bytes"
	"embed"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"time"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// csp allows this origin's stylesheet and nothing else: no script at
// all, no frame, no form posting elsewhere.
const csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; " +
	"frame-ancestors 'none'; base-uri 'none'"

// secure sets the headers every console answer carries.
func secure(h http.Header) {
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func staticFiles() http.Handler {
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	return http.StripPrefix("/ui/static/", http.FileServerFS(sub))
}

// page is what every template gets.
type page struct {
	// Name is the template's name, set by render (tests wait for it).
	Name  string
	Title string
	// Nav is the menu entry to mark current.
	Nav string
	// CSRF is the session's token, for the forms; "" when signed out.
	CSRF string
	// Refresh is the seconds after which the page reloads itself; 0 =
	// never.
	Refresh int
	// Notice is a line to show on top (an action's result).
	Notice string
	// Alert is a problem with the page as a whole, shown on top.
	Alert string
	Data  any
}

// pages are the parsed templates by name, each with the layout.
type pages map[string]*template.Template

var pageNames = []string{"login", "error", "overview", "events", "event", "held", "dead", "confirm"}

var funcs = template.FuncMap{
	"when":     when,
	"percent":  func(f float64) string { return fmt.Sprintf("%.1f%%", f*100) },
	"waitText": waitText,
	"key":      keyHTML,
}

// parsed are the templates, parsed once: they are fixed at build time,
// so a failure is a bug that every test of this package reports.
var parsed = func() pages {
	p := make(pages, len(pageNames))
	for _, name := range pageNames {
		p[name] = template.Must(template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html"))
	}
	return p
}()

// render writes page with the named template. It renders into a buffer
// first, so that a template failure is a clean 500, not half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, pg page) {
	var buf bytes.Buffer
	pg.Name = name
	if err := c.pages[name].Execute(&buf, pg); err != nil {
		c.o.Logger.ErrorContext(r.Context(), "console: rendering failed", "page", name, "err", err)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// errorData is the error page.
type errorData struct {
	Message string
	// Event links the event the message is about ("" = none).
	Event string
}

// fail renders the error page with message, which is the console's own
// words (an admin.OpError's detail at most, never a driver error).
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, status int, message string) {
	pg := page{Title: http.StatusText(status), Data: errorData{Message: message}}
	if s != nil {
		pg.CSRF = s.csrf
	}
	c.render(w, r, status, "error", pg)
}

// when formats t for the pages, in UTC; "—" for none.
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}
