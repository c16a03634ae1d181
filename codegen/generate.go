package codegen

import (
	"fmt"
	"slices"
	"sort"

	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/agentstream/agentstream/codegen/golang"
	"github.com/agentstream/agentstream/codegen/jsonschema"
	"github.com/agentstream/agentstream/codegen/model"
	"github.com/agentstream/agentstream/codegen/python"
	"github.com/agentstream/agentstream/codegen/ts"
)

// Generate writes the model in the target language. The output depends only
// on the model and the options. Warnings list what the target could not
// express exactly; an error means the output could not be produced at all.
func Generate(m *Model, opt Options) ([]byte, []Warning, error) {
	g := model.NewGen(m, opt)
	var out []byte
	var err error
	switch opt.Lang {
	case LangGo:
		out, err = golang.Generate(g)
	case LangJSONSchema:
		out, err = jsonschema.Generate(g)
	case LangTS:
		out, err = ts.Generate(g)
	case LangPython:
		out, err = python.Generate(g)
	default:
		return nil, nil, fmt.Errorf("unknown language %q", opt.Lang)
	}
	return out, append(slices.Clone(m.Warnings), g.Warnings()...), err
}

// Compile parses, resolves, lowers and generates in one call.
func Compile(file string, src []byte, opt Options) ([]byte, []Warning, error) {
	s, err := cddl.Parse(file, src)
	if err != nil {
		return nil, nil, err
	}
	res, err := cddl.Resolve(s)
	if err != nil {
		return nil, nil, err
	}
	return Generate(Lower(res), opt)
}

// ExplainAny generates the model's Go output and returns the rules whose
// Go types fall back to any, in schema order, with the reasons, and the
// number of rules (declarations) the model has.
func ExplainAny(m *Model, opt Options) ([]AnyUse, int, error) {
	opt.Lang = LangGo
	g := model.NewGen(m, opt)
	_, err := golang.Generate(g)
	rules := 0
	for _, d := range m.Decls {
		if !d.Synthetic {
			rules++
		}
	}
	uses := g.AnyUses()
	sort.SliceStable(uses, func(i, j int) bool { return uses[i].Pos.Offset < uses[j].Pos.Offset })
	return uses, rules, err
}
