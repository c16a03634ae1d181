package langgraph

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// notServed says why a member the Platform's requests may carry is not
// served here; a request that sets one (to anything but null) is refused
// 422 naming it, never taken and ignored. A member neither named by
// protocol/langgraph.cddl nor here is refused the same way, as unknown.
var notServed = map[string]string{
	"interrupt_before":  "agentstream's assistants stop where they ask (interrupts), not between steps",
	"interrupt_after":   "agentstream's assistants stop where they ask (interrupts), not between steps",
	"after_seconds":     "a run that starts later is not served",
	"feedback_keys":     "LangSmith feedback is not served",
	"langsmith_tracer":  "tracing to LangSmith is not served",
	"checkpoint_during": "a run's checkpoints are its assistant's",
	"durability":        "what a run writes is kept as the engine keeps every write (synced on --data-dir)",
	"strict_resume":     "a resume answers the pending interrupts as sent",
	"context":           "agentstream's assistants take their settings in config (configurable)",
	"supersteps":        "a thread made from supersteps is not served",
	"extract":           "a search answers whole threads (select picks members)",
}

// unserved names the members v holds that it does not serve (its own and
// its members' Extra, the members its CDDL rule does not name), each with
// why; nil when there are none.
func unserved(v any) error {
	var found []string
	walkExtra(reflect.ValueOf(v), "", &found)
	if len(found) == 0 {
		return nil
	}
	slices.Sort(found)
	return fmt.Errorf("%s", strings.Join(found, "; "))
}

func walkExtra(v reflect.Value, at string, found *[]string) {
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return
	}
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := at + f.Name
		if tag, _, _ := strings.Cut(f.Tag.Get("json"), ","); tag != "" && tag != "-" {
			name = at + tag
		}
		if f.Name == "Extra" && f.Type.Kind() == reflect.Map {
			for _, k := range v.Field(i).MapKeys() {
				if v.Field(i).MapIndex(k).IsNil() {
					continue // null: not set, as the SDK sends what it leaves out
				}
				key := at + k.String()
				why, known := notServed[k.String()]
				if !known {
					why = "not a member this server knows"
				}
				*found = append(*found, fmt.Sprintf("%s: not served (%s)", key, why))
			}
			continue
		}
		switch f.Type.Kind() {
		case reflect.Pointer, reflect.Struct:
			walkExtra(v.Field(i), name+".", found)
		}
	}
}
