package model

import (
	"testing"

	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/stretchr/testify/require"
)

func lowerSrc(t *testing.T, src string) *Model {
	t.Helper()
	s, err := cddl.Parse("t.cddl", []byte(src))
	require.NoError(t, err)
	res, err := cddl.Resolve(s)
	require.NoError(t, err)
	return Lower(res)
}

// TestSplicingIdiom: a map rule, or a group choice of map rules, written as
// a bare entry in a map merges its members into it.
func TestSplicingIdiom(t *testing.T) {
	t.Parallel()
	m := lowerSrc(t, `
Command = { id: uint, CommandData, Extensible }
CommandData = RunStart // RunCancel
RunStart = { method: "run.start", params: { assistantId: text } }
RunCancel = { method: "run.cancel", ? runId: text }
Extensible = ( * text => any )
`)
	cmd := m.Decl("Command").Shape
	require.Equal(t, KUnion, cmd.Kind, "a spliced group choice makes a choice of maps")
	require.Len(t, cmd.Alts, 2)
	disc, values := m.Discriminator(cmd)
	require.Equal(t, "method", disc)
	require.Equal(t, []string{"run.start", "run.cancel"}, values)
	start := m.Resolve(cmd.Alts[0])
	require.Equal(t, KStruct, start.Kind)
	var names []string
	for _, f := range start.Fields {
		names = append(names, f.Name)
	}
	require.Equal(t, []string{"id", "method", "params"}, names)
	require.NotNil(t, start.Rest, "Extensible was spliced too")
	cancel := m.Resolve(cmd.Alts[1])
	require.True(t, cancel.Fields[2].Optional)
}

// TestGroupChoiceAsTypeIdiom: a group-choice rule used where a type is
// expected is the type choice of its alternatives.
func TestGroupChoiceAsTypeIdiom(t *testing.T) {
	t.Parallel()
	m := lowerSrc(t, `
Event = { method: "messages", data: MessagesData }
MessagesData = MessageStart // MessageFinish
MessageStart = { event: "message-start", id: text }
MessageFinish = { event: "message-finish" }
`)
	data := m.Decl("Event").Shape.Fields[1].Shape
	require.Equal(t, KRef, data.Kind)
	md := m.Decl("MessagesData").Shape
	require.Equal(t, KUnion, md.Kind)
	require.Equal(t, "MessageStart", md.Alts[0].Ref)
	require.Equal(t, "MessageFinish", md.Alts[1].Ref)
	disc, _ := m.Discriminator(md)
	require.Equal(t, "event", disc)
}

func TestLeavesFlattenNestedUnions(t *testing.T) {
	t.Parallel()
	m := lowerSrc(t, `
Block = Text / Data
Data = Image / Audio
Text = { type: "text", text: tstr }
Image = { type: "image", url: tstr }
Audio = { type: "audio", url: tstr }
`)
	leaves := m.Leaves(m.Decl("Block").Shape)
	require.Len(t, leaves, 3)
	disc, values := m.Discriminator(m.Decl("Block").Shape)
	require.Equal(t, "type", disc)
	require.Equal(t, []string{"text", "image", "audio"}, values)
}

func TestNoDiscriminatorWhenValuesRepeat(t *testing.T) {
	t.Parallel()
	m := lowerSrc(t, `
U = A / B
A = { kind: "x", a: int }
B = { kind: "x", b: int }
`)
	disc, _ := m.Discriminator(m.Decl("U").Shape)
	require.Empty(t, disc)
}

func TestHoistedNamesAndWarnings(t *testing.T) {
	t.Parallel()
	m := lowerSrc(t, `
Outer = { inner: { a: int }, mode: "on" / "off", tag: #6.32(tstr), g: pair<int> }
pair<T> = [T, T]
`)
	require.NotNil(t, m.Decl("OuterInner"))
	require.NotNil(t, m.Decl("OuterMode"))
	require.True(t, m.Decl("OuterMode").Shape.IsTextEnum())
	var msgs []string
	for _, w := range m.Warnings {
		msgs = append(msgs, w.Rule+": "+w.Msg)
	}
	require.Contains(t, msgs, "Outer: tag 32 has no counterpart in this target; its content type is used")
	require.Contains(t, msgs, "pair: generic rule pair is expanded at each use rather than generated on its own")
}

func TestRangesAndControls(t *testing.T) {
	t.Parallel()
	m := lowerSrc(t, `
a = 1..10
b = 0.5...1.5
c = tstr .size (2..5)
d = bstr .size 16
e = uint .size 2
f = tstr .regexp "[a-z]+"
g = int .ge 3
h = "ab" .cat "cd"
i = 3 .plus 4
j = uint .bits (0 / 2)
k = 1..2.0
`)
	a := m.Decl("a").Shape
	require.Equal(t, KInt, a.Kind)
	require.Equal(t, "1", a.Min.Raw)
	require.Equal(t, "10", a.Max.Raw)
	b := m.Decl("b").Shape
	require.Equal(t, KFloat, b.Kind)
	require.True(t, b.MaxExclusive)
	c := m.Decl("c").Shape
	require.Equal(t, int64(2), *c.MinLen)
	require.Equal(t, int64(5), *c.MaxLen)
	d := m.Decl("d").Shape
	require.Equal(t, int64(16), *d.MinLen)
	require.Equal(t, int64(16), *d.MaxLen)
	require.Equal(t, "65535", m.Decl("e").Shape.Max.Raw)
	require.Equal(t, "[a-z]+", m.Decl("f").Shape.Pattern)
	require.Equal(t, "3", m.Decl("g").Shape.Min.Raw)
	require.Equal(t, "abcd", m.Decl("h").Shape.Lit.Text)
	require.Equal(t, "7", m.Decl("i").Shape.Lit.Raw)
	j := m.Decl("j").Shape
	require.Equal(t, KUnion, j.Kind)
	require.Len(t, j.Alts, 4) // 0, 1, 4, 5
	require.Equal(t, KNever, m.Decl("k").Shape.Kind, "an int..float range matches nothing")
}

// TestHoistedVariantNamesAreStable: the declarations hoisted out of a
// choice of anonymous maps are named by what selects each alternative
// (the discriminating literal, the member only it has, a literal only it
// has), so reordering the alternatives or adding one keeps every name.
func TestHoistedVariantNamesAreStable(t *testing.T) {
	t.Parallel()
	names := func(src string) map[string]bool {
		out := map[string]bool{}
		for _, d := range lowerSrc(t, src).Decls {
			if d.Synthetic {
				out[d.Name] = true
			}
		}
		return out
	}
	byLiteral := names(`Ev = { kind: "event", x: ({ method: "log.entryAdded", t: text } / { method: "net.request", u: text }) }`)
	require.Equal(t, map[string]bool{"EvX": true, "EvXLogEntryAdded": true, "EvXNetRequest": true}, byLiteral)
	require.Equal(t, byLiteral, names(`Ev = { kind: "event", x: ({ method: "net.request", u: text } / { method: "log.entryAdded", t: text }) }`))

	byMarker := names(`R = { r: ({ responses: [* text] } / { interruptId: text, response: any }) }`)
	require.Equal(t, map[string]bool{"RR": true, "RRResponses": true, "RRInterruptId": true}, byMarker)
	require.Equal(t, byMarker, names(`R = { r: ({ interruptId: text, response: any } / { responses: [* text] }) }`))

	mixed := names(`P = { p: ({ type: "a", n: int } / { type: "a", m: int } / { type: "b", n: int }) }`)
	again := names(`P = { p: ({ type: "b", n: int } / { type: "a", n: int } / { type: "a", m: int }) }`)
	require.True(t, mixed["PPB"], "%v", mixed)
	require.True(t, again["PPB"], "%v", again)
}
