package protocol

// Hand-written accessors on generated types, where reading a common value
// otherwise takes a type switch (d.Delta.Value.(*TextDelta).Text).

// Text is the text a text delta adds ("" for other deltas).
func (d ContentBlockDelta) Text() string {
	if t, ok := d.Value.(*TextDelta); ok {
		return t.Text
	}
	return ""
}

// Reasoning is the reasoning a reasoning delta adds ("" for others).
func (d ContentBlockDelta) Reasoning() string {
	if r, ok := d.Value.(*ReasoningDelta); ok {
		return r.Reasoning
	}
	return ""
}

// NamespaceOf returns where in the agent tree event v happened ([] for
// the root; nil for nil or a variant this package does not know).
func NamespaceOf(v ServerEventVariant) Namespace {
	switch e := v.(type) {
	case *ServerEventLifecycle:
		return e.Params.Namespace
	case *ServerEventMessages:
		return e.Params.Namespace
	case *ServerEventTools:
		return e.Params.Namespace
	case *ServerEventInputRequested:
		return e.Params.Namespace
	case *ServerEventInputAnswered:
		return e.Params.Namespace
	case *ServerEventValues:
		return e.Params.Namespace
	case *ServerEventUpdates:
		return e.Params.Namespace
	case *ServerEventCheckpoints:
		return e.Params.Namespace
	case *ServerEventCustom:
		return e.Params.Namespace
	case *ServerEventTasks:
		return e.Params.Namespace
	case *ServerEventEventsMissed:
		return e.Params.Namespace
	}
	return nil
}
