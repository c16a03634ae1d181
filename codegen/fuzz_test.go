package codegen

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/agentstream/agentstream/codegen/cddl"
)

// FuzzParse: parsing never panics; what parses also resolves, lowers and
// generates every target without panicking. Its seeds are the CDDL files
// of the golden tests and of the parser's.
func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob("testdata/*/*.cddl")
	more, _ := filepath.Glob("cddl/testdata/*/*.cddl")
	for _, p := range append(paths, more...) {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		s, err := cddl.Parse("fuzz.cddl", src)
		if err != nil {
			if _, ok := err.(cddl.ErrorList); !ok {
				t.Fatalf("error of type %T", err)
			}
			_ = cddl.FormatError(err, src)
			return
		}
		res, err := cddl.Resolve(s)
		if err != nil {
			return
		}
		m := Lower(res)
		for _, lang := range Langs {
			_, _, _ = Generate(m, Options{Lang: lang})
		}
	})
}
