package cddl

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func mustParse(t *testing.T, src string) *Schema {
	t.Helper()
	s, err := Parse("t.cddl", []byte(src))
	require.NoError(t, err)
	return s
}

func TestParseForms(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
a = { name: tstr, ? age: uint, * tstr => any }
b = [ 1*3 int, + text, 2* float, *5 bool ]
c = int / text / null
d //= ( x: 1 // y: 2 )
e = 0..10
f = -1.5...0x10
g = tstr .size (1..63)
h = #6.32(tstr)
i = #7.25
j = #
k = ~h
l = &( red: 1, green: 2 )
m = &l
n<T, U> = [T, U]
o = n<int, text>
p = { "quoted": int, 1: bytes, int ^ => text }
q = h'00 ff' / b64'AQID' / 'raw'
run.start = { method: "run.start", }
js-int = -9007199254740991..9007199254740991
$sock /= int
$$gsock //= ( z: int )
`)
	require.Len(t, s.Rules, 21)
	byName := map[string]*Rule{}
	for _, r := range s.Rules {
		byName[r.Name] = r
	}
	b := byName["b"].Type.Choices[0].Left.Group.Choices[0].Entries
	require.Equal(t, Occurrence{Pos: b[0].Occur.Pos, Min: 1, Max: 3}, *b[0].Occur)
	require.Equal(t, int64(1), b[1].Occur.Min)
	require.Equal(t, int64(-1), b[1].Occur.Max)
	require.Equal(t, int64(2), b[2].Occur.Min)
	require.Equal(t, int64(5), b[3].Occur.Max)

	require.Len(t, byName["c"].Type.Choices, 3)
	require.Equal(t, AssignGroupChoice, byName["d"].Assign)
	require.Len(t, byName["d"].Entry.Group.Choices, 2)
	require.Equal(t, "..", byName["e"].Type.Choices[0].Op)
	f := byName["f"].Type.Choices[0]
	require.Equal(t, "...", f.Op)
	require.Equal(t, ValueFloat, f.Left.Value.Kind)
	require.Equal(t, "16", f.Right.Value.Int.String())
	require.Equal(t, ".size", byName["g"].Type.Choices[0].Op)
	h := byName["h"].Type.Choices[0].Left
	require.Equal(t, T2Tag, h.Kind)
	require.Equal(t, "32", h.Tag.String())
	require.Equal(t, T2Major, byName["i"].Type.Choices[0].Left.Kind)
	require.Equal(t, T2Any, byName["j"].Type.Choices[0].Left.Kind)
	require.Equal(t, T2Unwrap, byName["k"].Type.Choices[0].Left.Kind)
	require.Equal(t, T2EnumGroup, byName["l"].Type.Choices[0].Left.Kind)
	require.Equal(t, T2EnumName, byName["m"].Type.Choices[0].Left.Kind)
	require.Equal(t, []string{"T", "U"}, byName["n"].Params)
	require.Len(t, byName["o"].Type.Choices[0].Left.Args, 2)

	p := byName["p"].Type.Choices[0].Left.Group.Choices[0].Entries
	require.Equal(t, KeyValue, p[0].Key.Kind)
	require.Equal(t, "quoted", p[0].Key.Value.Text)
	require.Equal(t, ValueInt, p[1].Key.Value.Kind)
	require.Equal(t, KeyType, p[2].Key.Kind)
	require.True(t, p[2].Key.Cut)

	q := byName["q"].Type.Choices
	require.Equal(t, []byte{0, 0xff}, q[0].Left.Value.Bytes)
	require.Equal(t, []byte{1, 2, 3}, q[1].Left.Value.Bytes)
	require.Equal(t, []byte("raw"), q[2].Left.Value.Bytes)
	require.Contains(t, byName, "run.start")
	require.Contains(t, byName, "js-int")
	require.Contains(t, byName, "$$gsock")
}

func TestParseTextEscapes(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `a = "q\"\\\n\u00e9\ud83d\ude00"`)
	require.Equal(t, "q\"\\\né😀", s.Rules[0].Type.Choices[0].Left.Value.Text)
}

// TestParseDocComments: a comment block directly above a rule or member is
// its documentation; a comment after a member on its line documents it;
// anything separated by a blank line or elsewhere is not documentation.
func TestParseDocComments(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `; ===== section header =====
; not attached: a blank line follows

; The person.
; Second line.
person = {
  ; Their name.
  name: tstr,
  age: uint,   ; in years
  ; orphan above a blank line

  email: tstr,
  nick: tstr ; the nickname
}
; a comment with a blank line after it

other = int ; an int
`)
	p := s.Rules[0]
	require.Equal(t, "The person.\nSecond line.", p.Doc)
	es := p.Type.Choices[0].Left.Group.Choices[0].Entries
	require.Equal(t, "Their name.", es[0].Doc)
	require.Equal(t, "in years", es[1].Doc)
	require.Equal(t, "", es[2].Doc)
	require.Equal(t, "the nickname", es[3].Doc)
	require.Equal(t, "an int", s.Rules[1].Doc)
}

func TestParseErrorsHavePositions(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		line, col int
		msg       string
	}{
		{"missing assign", "a int", 1, 3, "expected '=', '/=' or '//='"},
		{"unclosed map", "a = { b: int", 1, 13, "expected '}'"},
		{"bad char", "a = int !", 1, 9, "unexpected character '!'"},
		{"bad occurrence", "a = [ 3*2 int ]", 1, 7, "maximum below its minimum"},
		{"no rules", "; only a comment\n", 2, 1, "at least one rule"},
		{"unterminated text", "a = \"abc\n", 1, 5, "unterminated text string"},
		{"bad hex", "a = h'0g'", 1, 5, "invalid hex byte string"},
		{"type choice on group", "a /= b: int", 1, 3, "'/=' adds type alternatives"},
		{"major out of range", "a = #9", 1, 5, "major type 9 is out of range"},
		{"second rule error", "a = int\nb = [", 2, 6, "expected ']'"},
		// Issue 15, bug 6: the missing argument is reported where it is
		// missing, not on the next rule's '='.
		{"control without argument", "a = text .size\nb = int", 1, 10, ".size needs an argument after it, before the rule b on line 2"},
		{"range without upper bound", "a = 1 ..\nb = int", 1, 7, ".. needs an argument"},
		{"quoted rule name", "\"b\" = int", 1, 1, "a rule name must be an identifier, not a text string"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("t.cddl", []byte(tc.src))
			require.Error(t, err)
			var list ErrorList
			require.ErrorAs(t, err, &list)
			e := list[0]
			require.Equal(t, tc.line, e.Pos.Line, "%v", e)
			require.Equal(t, tc.col, e.Pos.Col, "%v", e)
			require.Contains(t, e.Msg, tc.msg)
			require.True(t, strings.HasPrefix(e.Error(), "t.cddl:"), e.Error())
		})
	}
}

func TestParseRecoversAndReportsEveryRule(t *testing.T) {
	t.Parallel()
	_, err := Parse("t.cddl", []byte("a = [\nb = int\nc = {\nd = text\n"))
	var list ErrorList
	require.ErrorAs(t, err, &list)
	require.Len(t, list, 2)
	require.Equal(t, 2, list[0].Pos.Line)
	require.Equal(t, 4, list[1].Pos.Line)
}

func TestParseDeepNestingIsAnError(t *testing.T) {
	t.Parallel()
	src := "a = " + strings.Repeat("[", 5000) + strings.Repeat("]", 5000)
	_, err := Parse("t.cddl", []byte(src))
	require.ErrorContains(t, err, "nesting deeper than")
}

func TestFormatErrorShowsCaret(t *testing.T) {
	t.Parallel()
	src := []byte("a = int\nb = { c: }\n")
	_, err := Parse("t.cddl", src)
	got := FormatError(err, src)
	require.Equal(t, "t.cddl:2:10: expected a type, found \"}\"\n    b = { c: }\n             ^\n", got)
}

func TestResolveErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, src string
		msgs      []string
	}{
		{"undefined", "a = { b: foo, c: [* bar] }", []string{"1:10: undefined name foo", "1:21: undefined name bar"}},
		{"duplicate", "a = int\nb = a\na = text", []string{"3:1: rule a is defined twice (first at 1:1)"}},
		{"generic arity", "p<T> = [T]\na = p<int, text>\nb = p", []string{"2:5: p takes 1 generic argument(s), got 2", "3:5: p takes 1 generic argument(s), got 0"}},
		{"type alt on group", "g = (x: int)\ng /= text", []string{"2:1: '/=' adds type alternatives, but g is a group rule"}},
		// Issue 15, bug 5: a range no value satisfies.
		{"empty range", "a = 10..1\nb = [ 1.5...1.5 ]\nc = 1..1", []string{"1:5: the range 10..1 holds no value", "2:7: the range 1.5...1.5 holds no value"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := mustParse(t, tc.src)
			_, err := Resolve(s)
			require.Error(t, err)
			var list ErrorList
			require.ErrorAs(t, err, &list)
			require.Len(t, list, len(tc.msgs), "%v", err)
			for i, m := range tc.msgs {
				require.Contains(t, list[i].Error(), m)
			}
		})
	}
}

func TestResolveAllowsRecursionSocketsAndIdenticalRepeats(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
tree = { children: [* tree] }
a = { ? x: $undefined-socket, $$more }
ttl = 0..10
ttl = 0..10   ; an identical repetition is accepted
int = text    ; the schema may redefine a prelude name
`)
	res, err := Resolve(s)
	require.NoError(t, err)
	require.False(t, res.Defs["int"].Prelude)
}

func TestResolveMergesChoices(t *testing.T) {
	t.Parallel()
	s := mustParse(t, `
color = "red"
color /= "green"
color /= "blue"
ops //= (a: int)
ops //= (b: text)
`)
	res, err := Resolve(s)
	require.NoError(t, err)
	require.Len(t, res.Defs["color"].Type.Choices, 3)
	require.True(t, res.Defs["ops"].IsGroup)
	require.Len(t, res.Defs["ops"].Group.Choices, 2)
}

// TestRFC8610Examples: every example of RFC 8610 parses (a rule list, or
// for the one bare group, a group).
func TestRFC8610Examples(t *testing.T) {
	t.Parallel()
	paths, err := filepath.Glob("testdata/rfc8610/*.cddl")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(paths), 50)
	for _, p := range paths {
		src, err := os.ReadFile(p)
		require.NoError(t, err)
		if _, err := Parse(p, src); err != nil {
			_, gerr := ParseGroup(p, src)
			require.NoError(t, gerr, "%s: neither rules (%v) nor a group", p, err)
		}
	}
}
