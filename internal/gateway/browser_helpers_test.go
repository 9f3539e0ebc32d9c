package gateway

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// chrome is a headless Chromium driven through chromedp, for the console's
// browser tests. It records every URL the pages ask for, and saves a
// screenshot of each page in the test's artifact directory (kept with
// go test -artifacts).
type chrome struct {
	tb  testing.TB
	ctx context.Context
	dir string

	mu       sync.Mutex
	requests []string
	shots    int
}

// stepTimeout bounds one step: a page that never shows what a step waits
// for fails the test with its screenshot, rather than hanging it.
const stepTimeout = 20 * time.Second

// startChrome launches Debian's chromium with a fresh profile. make test
// installs it when missing (scripts/check-deps.sh).
func startChrome(t *testing.T) *chrome {
	t.Helper()
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		t.Fatal("chromium is not installed: apt-get install -y chromium (make test installs it)")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// Chromium puts its singleton socket in TMPDIR and leaves it there.
		chromedp.Env("TMPDIR="+t.TempDir()),
	)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	c := &chrome{tb: t, ctx: ctx, dir: t.ArtifactDir()}
	// Listen starts the browser, bound to ctx (no timeout), and sees each
	// request before the command that caused it returns.
	err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			c.mu.Lock()
			c.requests = append(c.requests, e.Request.URL)
			c.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return c
}

// do runs steps; on failure the test ends with a screenshot and the page.
func (c *chrome) do(what string, steps ...chromedp.Action[chromedp.Void]) {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, stepTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		c.fail(what, err)
	}
}

// text is the text of the element sel.
func (c *chrome) text(sel string) string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		c.fail("read "+sel, err)
	}
	return s
}

// open navigates to u and waits for the console page named page.
func (c *chrome) open(u, page string) {
	c.tb.Helper()
	c.do("open "+u, chromedp.Navigate(u), c.waitPage(page))
}

// click clicks sel and waits for the console page named page.
func (c *chrome) click(sel, page string) {
	c.tb.Helper()
	c.do("click "+sel, chromedp.Click(chromedp.CSS(sel), chromedp.NodeVisible), c.waitPage(page))
}

func (c *chrome) waitPage(page string) chromedp.Action[chromedp.Void] {
	return chromedp.WaitVisible(chromedp.CSS(fmt.Sprintf(`body[data-page=%q]`, page)))
}

// shot saves a screenshot of the whole page as name (PNG: quality 100)
// and returns its path.
func (c *chrome) shot(name string) string {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(c.ctx, stepTimeout)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return fmt.Sprintf("(no screenshot: %v)", err)
	}
	c.mu.Lock()
	c.shots++
	path := filepath.Join(c.dir, fmt.Sprintf("%02d-%s.png", c.shots, name))
	c.mu.Unlock()
	if err := os.WriteFile(path, png, 0o644); err != nil {
		return fmt.Sprintf("(no screenshot: %v)", err)
	}
	return path
}

// fail ends the test with what failed, a screenshot and the page's HTML.
func (c *chrome) fail(what string, err error) {
	c.tb.Helper()
	path := c.shot("failure")
	ctx, cancel := context.WithTimeout(c.ctx, stepTimeout)
	defer cancel()
	html, herr := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	if herr != nil {
		html = fmt.Sprintf("(no HTML: %v)", herr)
	}
	c.tb.Fatalf("browser: %s: %v\nscreenshot: %s\npage HTML:\n%s", what, err, path, html)
}

// wantOnlyHost fails the test when a page asked for anything from a host
// other than host.
func (c *chrome) wantOnlyHost(host string) {
	c.tb.Helper()
	c.mu.Lock()
	reqs := slices.Clone(c.requests)
	c.mu.Unlock()
	if len(reqs) == 0 {
		c.tb.Fatal("the browser made no request at all: the recorder is not listening")
	}
	for _, r := range reqs {
		u, err := url.Parse(r)
		if err == nil && u.Scheme == "data" {
			continue // inline, from the browser itself (a date field's calendar icon)
		}
		if err != nil || u.Host != host {
			c.tb.Errorf("a page asked for %s, not from the console's host %s", r, host)
		}
	}
}
