package transport

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/agentstream/agentstream/auth"
	"github.com/agentstream/agentstream/protocol"
	"github.com/agentstream/agentstream/transport/internal/httpjson"
)

// storeLabel is the first label of the namespaces a principal that is not
// an admin keeps in the upstream's store through the edge: its subject,
// with "." and "%" escaped (the store refuses labels with a period).
func storeLabel(p *auth.Principal) string {
	return "principal:" + strings.NewReplacer("%", "%25", ".", "%2E").Replace(p.Subject)
}

// proxyStore forwards a store route (/store/items, /store/items/search,
// /store/namespaces) so that a principal that is not an admin keeps its
// own store, as the Platform profile does: each namespace it names is put
// under its storeLabel on the way up, and the label taken off every
// namespace of the answer (an item or namespace under another label is
// left out). Admins see the upstream's store as it is.
func (h *Handler) proxyStore(next http.Handler, w http.ResponseWriter, r *http.Request, p *auth.Principal, body []byte) {
	if p.Admin {
		forward(next, w, r, body)
		return
	}
	label := storeLabel(p)
	under := func(ns any) []any {
		out := []any{label}
		if l, ok := ns.([]any); ok {
			out = append(out, l...)
		}
		return out
	}
	path := strings.Trim(r.URL.Path, "/")
	switch {
	case path == "store/items" && r.Method == http.MethodGet:
		q := r.URL.Query()
		ns := label
		if v := q.Get("namespace"); v != "" {
			ns += "." + v
		}
		q.Set("namespace", ns)
		r.URL.RawQuery = q.Encode()
		h.rewriteAnswer(next, w, r, nil, func(status int, b []byte) ([]byte, error) {
			if status/100 != 2 {
				return b, nil
			}
			if it, ok := stripItem(b, label); ok {
				return it, nil
			}
			return []byte("null"), nil // none, or another label's
		})
	case path == "store/items" && (r.Method == http.MethodPut || r.Method == http.MethodDelete):
		m, ok := objectBody(w, body)
		if !ok {
			return
		}
		m["namespace"] = under(m["namespace"])
		out, _ := json.Marshal(m)
		forward(next, w, r, out)
	case path == "store/items/search" && r.Method == http.MethodPost:
		m, ok := objectBody(w, body)
		if !ok {
			return
		}
		m["namespace_prefix"] = under(m["namespace_prefix"])
		out, _ := json.Marshal(m)
		h.rewriteAnswer(next, w, r, out, func(status int, b []byte) ([]byte, error) {
			var ans map[string]json.RawMessage
			if status/100 != 2 || json.Unmarshal(b, &ans) != nil {
				return b, nil
			}
			var items []json.RawMessage
			_ = json.Unmarshal(ans["items"], &items)
			kept := make([]json.RawMessage, 0, len(items))
			for _, it := range items {
				if s, ok := stripItem(it, label); ok {
					kept = append(kept, s)
				}
			}
			ans["items"], _ = json.Marshal(kept)
			return json.Marshal(ans)
		})
	case path == "store/namespaces" && r.Method == http.MethodPost:
		m, ok := objectBody(w, body)
		if !ok {
			return
		}
		m["prefix"] = under(m["prefix"])
		if d, ok := m["max_depth"].(float64); ok {
			m["max_depth"] = d + 1
		}
		out, _ := json.Marshal(m)
		h.rewriteAnswer(next, w, r, out, func(status int, b []byte) ([]byte, error) {
			var ans struct {
				Namespaces [][]string `json:"namespaces"`
			}
			if status/100 != 2 || json.Unmarshal(b, &ans) != nil {
				return b, nil
			}
			kept := [][]string{}
			for _, ns := range ans.Namespaces {
				if len(ns) > 1 && ns[0] == label {
					kept = append(kept, ns[1:])
				}
			}
			return json.Marshal(map[string]any{"namespaces": kept})
		})
	default:
		h.metrics.AuthRefused("permission_denied")
		httpjson.Write(w, http.StatusForbidden, protocol.NewError(nil, protocol.ErrorCodePermissionDenied, "%s %s is for admins only through the edge (a store route the edge has no rule for)", r.Method, r.URL.Path))
	}
}

// stripItem takes label off a store item's namespace; ok is false for
// what is no item under label (null, another label's).
func stripItem(b []byte, label string) (_ []byte, ok bool) {
	var it map[string]json.RawMessage
	if json.Unmarshal(b, &it) != nil || it == nil {
		return nil, false
	}
	var ns []string
	if json.Unmarshal(it["namespace"], &ns) != nil || len(ns) == 0 || ns[0] != label {
		return nil, false
	}
	it["namespace"], _ = json.Marshal(ns[1:])
	out, err := json.Marshal(it)
	return out, err == nil
}

// maxRunOwners bounds the stateless runs whose creators a node remembers
// (runOwners); past it the oldest is forgotten, and joining it by run id
// is then for admins only.
const maxRunOwners = 1 << 16

// runOwners remembers who started each stateless run through this node.
type runOwners struct {
	mu    sync.Mutex
	by    map[string]string
	order []string
}

func (o *runOwners) add(run, subject string) {
	if run == "" {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.by == nil {
		o.by = map[string]string{}
	}
	if _, ok := o.by[run]; !ok {
		o.order = append(o.order, run)
	}
	o.by[run] = subject
	for len(o.order) > maxRunOwners {
		delete(o.by, o.order[0])
		o.order = o.order[1:]
	}
}

func (o *runOwners) owner(run string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.by[run]
}
