package codegen

import (
	"fmt"
	"go/format"
	"strings"
	"testing"

	"github.com/agentstream/agentstream/codegen/cddl"
)

// benchSchema builds a deterministic schema shaped like the agent
// streaming protocol's: documented maps spliced from group choices,
// literal discriminators, enumerations, optional and extensible members.
// With n = 130 rules it is about 40 KB.
func benchSchema(n int) []byte {
	var b strings.Builder
	b.WriteString("; Benchmark schema, shaped like protocol.cddl.\n\nExtensible = ( * text => any )\n\n")
	var alts []string
	for i := 0; len(alts)*4+2 < n; i++ {
		name := fmt.Sprintf("Op%02d", i)
		alts = append(alts, name)
		fmt.Fprintf(&b, `; %[1]s is operation number %[2]d. It carries a method name, its
; parameters and a result; clients ignore members they do not know.
; The comment is long on purpose, as the protocol's comments are.
%[1]s = {
  method: "op.%[2]d",
  params: %[1]sParams,
}

; Parameters of %[1]s. Every member is described, as in the protocol,
; so that generated bindings carry the documentation to their users.
%[1]sParams = {
  ; The thread the operation applies to. Threads are created lazily.
  threadId: text,
  ; Path in the agent tree: [] is the root agent.
  ? namespace: [* text],
  ; How many items to return at most, between 1 and 1000.
  ? limit: 1..1000,
  ; How the operation runs; see the mode type.
  ? mode: %[1]sMode,
  ; Free-form labels attached by the client, echoed back in events.
  ? labels: { * text => text },
  ? sentAt: uint,
  Extensible,
}

; Modes of %[1]s.
%[1]sMode = "fast" / "safe" / "dry-run" / "replay-%[2]d"

; Result of %[1]s. A result always says whether the operation succeeded
; and, when it did, the last sequence number it saw.
%[1]sResult = {
  ; Whether the operation succeeded.
  ok: bool,
  ; The last sequence number published before the operation took effect.
  ? seq: uint,
  ; A message for people when the operation failed, or null.
  ? error: text / null,
  ; The items found, each with its identifier and value.
  ? items: [* { id: text, ? value: any }],
  Extensible,
}

`, name, i)
	}
	fmt.Fprintf(&b, "Operation = %s\n\n", strings.Join(alts, " // "))
	b.WriteString("Command = { id: uint, Operation, Extensible }\n")
	return []byte(b.String())
}

// BenchmarkCompileGo parses, resolves, lowers and generates Go for a
// 40 KB, 130-rule schema.
func BenchmarkCompileGo(b *testing.B) {
	src := benchSchema(130)
	s, err := cddl.Parse("bench.cddl", src)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(s.Rules)), "rules")
	b.ReportMetric(float64(len(src))/1024, "KiB")
	b.SetBytes(int64(len(src)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, _, err := Compile("bench.cddl", src, Options{Lang: LangGo, Package: "bench", FieldCase: CaseSnake}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkParse is the parser alone on the same schema.
func BenchmarkParse(b *testing.B) {
	src := benchSchema(130)
	b.SetBytes(int64(len(src)))
	for i := 0; i < b.N; i++ {
		if _, err := cddl.Parse("bench.cddl", src); err != nil {
			b.Fatal(err)
		}
	}
}

func TestBenchSchemaIsRepresentative(t *testing.T) {
	src := benchSchema(130)
	s, err := cddl.Parse("bench.cddl", src)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(s.Rules); n < 125 || n > 135 {
		t.Fatalf("%d rules, want about 130", n)
	}
	if kb := len(src) / 1024; kb < 35 || kb > 45 {
		t.Fatalf("%d KiB, want about 40", kb)
	}
	if _, _, err := Compile("bench.cddl", src, Options{Lang: LangGo}); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkFormatGoOutput is go/format over the whole Go output of
// BenchmarkCompileGo's schema: what a writer that formats the file once
// at the end (as protogen's does) would add to a compile.
func BenchmarkFormatGoOutput(b *testing.B) {
	out, _, err := Compile("bench.cddl", benchSchema(130), Options{Lang: LangGo, Package: "bench", FieldCase: CaseSnake})
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(out)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := format.Source(out); err != nil {
			b.Fatal(err)
		}
	}
}
