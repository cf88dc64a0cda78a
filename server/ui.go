package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// The web dashboard's static files (docs/observability.md, "Dashboard"):
// HTML, CSS and JS embedded in the binary, served at / and /ui/ of the API
// listener without a key. They hold no data: the page asks the API for
// everything with the key the user enters, so these routes add nothing to
// what an unauthenticated caller can learn or do.
//
//go:embed ui/index.html ui/app.js ui/app.css ui/favicon.svg
var uiFiles embed.FS

// UIContentSecurityPolicy is the dashboard's Content-Security-Policy: only
// this origin's scripts, styles, images and API (no inline script or
// style, no eval), no plugins, no framing, no form submission (the sign-in
// form is handled by script, so the key can never be submitted into a
// URL), no base URL changes.
const UIContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiHeaders sets the security headers of every dashboard response.
func uiHeaders(h http.Header) {
	h.Set("Content-Security-Policy", UIContentSecurityPolicy)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=()")
	h.Set("Cache-Control", "no-cache")
}

// mountUI serves the dashboard: GET / is the page, GET /ui/ its assets.
// Other paths stay 404 (the pattern "/{$}" matches / alone).
func mountUI(mux *http.ServeMux) {
	sub, err := fs.Sub(uiFiles, "ui")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	assets := http.StripPrefix("/ui/", http.FileServerFS(sub))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w.Header())
		http.ServeFileFS(w, r, sub, "index.html")
	})
	mux.HandleFunc("GET /ui/{file}", func(w http.ResponseWriter, r *http.Request) {
		uiHeaders(w.Header())
		assets.ServeHTTP(w, r)
	})
}
