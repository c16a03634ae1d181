package langgraph

import (
	"net/http"
	"runtime/debug"
	"sync"
)

// ok serves GET /ok: the server answers (the Platform's own check, which
// front ends call before anything else).
func (h *Handler) ok(w http.ResponseWriter, _ *http.Request) {
	write(w, http.StatusOK, LgOk{Ok: true})
}

// info serves GET /info: the build, and which of the Platform's optional
// parts this server serves (LangChain's front ends read it to decide what
// to show, and report a server without it as unreachable).
func (h *Handler) info(w http.ResponseWriter, _ *http.Request) {
	write(w, http.StatusOK, LgInfo{Version: buildVersion(), Flags: LgInfoFlags{
		Assistants: true,  // searched, read and counted (assistants.go)
		Crons:      false, // not served: /runs/crons answers 404
		Langsmith:  false, // no tracing to LangSmith
	}})
}

// buildVersion is the module's version, or for a build from a checkout
// its VCS revision.
var buildVersion = sync.OnceValue(func() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	if v == "" || v == "(devel)" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				return "devel-" + s.Value[:12]
			}
		}
		return "devel"
	}
	return v
})
