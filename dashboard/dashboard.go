// Package dashboard is the cluster dashboard a node serves at its HTTP
// port's "/": a static page, embedded in the binary (as Nomad's UI), that
// reads the node's JSON API (/v1/status, /v1/actors,
// /v1/placement-groups, /v1/jobs) from the browser every two seconds. It
// fetches nothing from the internet, so it works in an air-gapped browser,
// and holds no state in the node: an idle node pays only for the embedded
// files (about 20 KB).
package dashboard

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Files are the dashboard's files: index.html, app.js and style.css.
func Files() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic("dashboard: embedded assets missing: " + err.Error()) // a build error, caught by every test
	}
	return sub
}

// Handler serves Files for GET requests of "/" and the files' own paths,
// 404 for anything else. Responses carry a Content-Security-Policy that
// allows only the page's own script, style and same-origin fetches (cluster
// data is written with textContent, never as HTML, and this header is the
// second fence against a hostile actor or node name), and forbid framing.
func Handler() http.Handler {
	files := http.FileServerFS(Files())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/", "/index.html", "/app.js", "/style.css":
		default:
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}
