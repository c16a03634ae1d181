package codegen
import ("testing";"os";"path/filepath";"strings")
func TestParseAllTmp(t *testing.T){
  files,_ := filepath.Glob("../../shared/cddl-corpus/*/*.cddl")
  f2,_ := filepath.Glob("../../shared/cddl-corpus/*/*/*.cddl")
  files = append(files, f2...)
  ok:=0
  for _,f := range files { src,_ := os.ReadFile(f); _,err := Parse(f,src); if err!=nil { s:=err.Error(); if len(s)>300 {s=s[:300]}; t.Logf("%s", strings.ReplaceAll(s,"../../shared/cddl-corpus/","")) } else {ok++} }
  t.Logf("ok %d of %d", ok, len(files))
}
func TestResolveAllTmp(t *testing.T){
  files,_ := filepath.Glob("../../shared/cddl-corpus/*/*.cddl")
  f2,_ := filepath.Glob("../../shared/cddl-corpus/*/*/*.cddl")
  files = append(files, f2...)
  ok:=0
  for _,f := range files { if strings.Contains(f,"rfc8610/") || strings.Contains(f,"invalid/") {continue}; src,_ := os.ReadFile(f); s,err := Parse(f,src); if err!=nil {continue}; _,err=Resolve(s); if err!=nil { m:=err.Error(); if len(m)>400 {m=m[:400]}; t.Logf("%s", strings.ReplaceAll(m,"../../shared/cddl-corpus/","")) } else {ok++} }
  t.Logf("ok %d of %d", ok, len(files))
}
