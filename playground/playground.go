// Package playground is the page `agentstream serve` serves at / (unless
// --playground=false): a single page, embedded in the binary with no
// external requests, to watch and steer a thread: start a run of any
// assistant, see the agent tree, the messages assembling token by token,
// tool calls with their arguments and results, the latest values and the
// raw event log, answer interrupts, cancel the run. It talks to the
// server over the WebSocket transport (reconnecting with
// subscription.reconnect) and is written in plain JavaScript type-checked
// against the generated TypeScript bindings (tsc --checkJs, in the tests),
// so it needs no build step.
package playground

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"
)

//go:embed web
var files embed.FS

// Handler serves the page at / and its assets under /playground/.
func Handler() http.Handler {
	web, err := fs.Sub(files, "web")
	if err != nil {
		panic(err) // the embedded tree is part of the binary
	}
	assets := http.StripPrefix("/playground/", http.FileServer(http.FS(web)))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY") // no page may frame it (a click on Approve or Cancel tricked)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if r.URL.Path == "/" {
			http.ServeFileFS(w, r, web, "index.html")
			return
		}
		if strings.HasSuffix(r.URL.Path, "/") {
			http.NotFound(w, r) // no directory listings
			return
		}
		assets.ServeHTTP(w, r)
	})
}
