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
