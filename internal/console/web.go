package console

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web console: one page and its script and style sheet, no
// dependencies and no build step. The script renders every value from the
// API as a text node, never as markup.
//
//go:embed web
var webFS embed.FS

// assets serves /assets/console.js and /assets/console.css.
var assets = must(fs.Sub(webFS, "web"))

var page = must(webFS.ReadFile("web/index.html"))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// pageCSP lets the page load its own script, style sheet and API answers,
// and nothing else: no inline script or style, no other origin.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func servePage(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(page)
}
