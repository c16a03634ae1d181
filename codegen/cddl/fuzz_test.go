package cddl

import (
	"os"
	"path/filepath"
	"testing"
)

// fuzzSeeds adds every CDDL file under testdata as a seed.
func fuzzSeeds(f *testing.F) {
	paths, _ := filepath.Glob("../testdata/*/*.cddl")
	more, _ := filepath.Glob("testdata/*/*.cddl")
	paths = append(paths, more...)
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("a = { b: [* c], ? d: #6.32(tstr) }\nc = 1..10 / \"x\" .regexp \"[a-z]+\""))
	f.Add([]byte("a = h'00' / b64'AA==' / '\\u{1F600}'\n"))
}

// FuzzLex: the lexer never panics and positions never go backwards.
func FuzzLex(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		toks, _ := lex("fuzz.cddl", src)
		if len(toks) == 0 || toks[len(toks)-1].kind != tEOF {
			t.Fatal("token stream does not end with EOF")
		}
		for i := 1; i < len(toks); i++ {
			if toks[i].pos.Offset < toks[i-1].pos.Offset {
				t.Fatalf("token %d at offset %d is before token %d at %d", i, toks[i].pos.Offset, i-1, toks[i-1].pos.Offset)
			}
		}
	})
}
