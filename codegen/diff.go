package codegen

import (
	"fmt"
	"strings"
)

// Diff returns a unified-style diff of two texts: the common head and tail
// are kept as context and the differing middle is shown as removed and
// added lines. It is meant for people reading a --check failure.
func Diff(nameA, nameB string, a, b []byte) string {
	la := strings.SplitAfter(string(a), "\n")
	lb := strings.SplitAfter(string(b), "\n")
	pre := 0
	for pre < len(la) && pre < len(lb) && la[pre] == lb[pre] {
		pre++
	}
	suf := 0
	for suf < len(la)-pre && suf < len(lb)-pre && la[len(la)-1-suf] == lb[len(lb)-1-suf] {
		suf++
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	ctx := 3
	start := max(pre-ctx, 0)
	endA, endB := len(la)-suf, len(lb)-suf
	tailA := min(endA+ctx, len(la))
	fmt.Fprintf(&out, "@@ -%d,%d +%d,%d @@\n", start+1, tailA-start, start+1, min(endB+ctx, len(lb))-start)
	line := func(prefix, s string) {
		out.WriteString(prefix + strings.TrimSuffix(s, "\n") + "\n")
	}
	for _, s := range la[start:pre] {
		line(" ", s)
	}
	for _, s := range la[pre:endA] {
		line("-", s)
	}
	for _, s := range lb[pre:endB] {
		line("+", s)
	}
	for _, s := range la[endA:tailA] {
		line(" ", s)
	}
	return out.String()
}
