package main

import (
	"flag"
	"fmt"
	"github.com/agentstream/agentstream/auth"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// A config file (serve --config FILE, or AGENTSTREAM_CONFIG) sets serve's
// flags by their names, in TOML:
//
//	addr = "0.0.0.0:2024"
//	profiles = ["langgraph", "openai"]   # a list is the flag's comma-separated value
//	max-threads = 50000
//	redis-write-through = true
//
// A flag on the command line wins over its environment variable, which
// wins over the file, which wins over the default (a key the environment
// or the command line sets is not read). A key that names no flag is
// refused, naming it.

// settings records where the flags' values came from.
type settings struct {
	cmdline map[string]bool // set on the command line
	given   map[string]bool // set by any source: the command line, the environment or the file
	file    string          // the config file read, if any
}

// applySources sets fs's flags from the environment and the config file
// for those the command line did not set (fs has been parsed).
func applySources(fs *flag.FlagSet, configPath string) (settings, error) {
	s := settings{cmdline: map[string]bool{}, given: map[string]bool{}}
	fs.Visit(func(f *flag.Flag) { s.cmdline[f.Name], s.given[f.Name] = true, true })
	if configPath == "" {
		configPath = os.Getenv("AGENTSTREAM_CONFIG")
	}
	if configPath != "" {
		s.file = configPath
		if err := applyConfigFile(fs, configPath, s.cmdline, s.given); err != nil {
			return s, err
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if s.cmdline[f.Name] || err != nil {
			return
		}
		name := envName(f.Name)
		if v, ok := os.LookupEnv(name); ok {
			s.given[f.Name] = true
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, e)
			}
		}
	})
	return s, err
}

// envName is a flag's environment variable: AGENTSTREAM_ and its name in
// capitals, dashes as underscores.
func envName(flagName string) string {
	return "AGENTSTREAM_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// applyConfigFile sets the flags the file names, but those in skip (set
// on the command line) and those whose environment variable is set.
func applyConfigFile(fs *flag.FlagSet, path string, skip, named map[string]bool) error {
	var values map[string]any
	_, err := toml.DecodeFile(path, &values)
	if err != nil {
		return fmt.Errorf("--config %s: %w", path, err)
	}
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := fs.Lookup(k)
		if f == nil || k == "config" || k == "print-config" {
			return fmt.Errorf("--config %s: %q is not a flag of serve (agentstream serve -h lists them)", path, k)
		}
		named[k] = true
		v, err := configValue(values[k])
		if err != nil {
			return fmt.Errorf("--config %s: %s: %w", path, k, err)
		}
		if _, env := os.LookupEnv(envName(k)); skip[k] || env {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			return fmt.Errorf("--config %s: %s = %q: %w", path, k, v, err)
		}
	}
	return nil
}

// configValue is a TOML value as its flag's text: a string as it is, a
// number or a boolean as written, a list of them comma-separated.
func configValue(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			s, err := configValue(x)
			if err != nil {
				return "", err
			}
			if _, nested := x.([]any); nested || strings.Contains(s, ",") {
				return "", fmt.Errorf("a list holds plain values without commas")
			}
			parts[i] = s
		}
		return strings.Join(parts, ","), nil
	default:
		return "", fmt.Errorf("a string, a number, a boolean or a list of them, not %T", v)
	}
}

// printConfig writes every flag of fs with its value now, as a config
// file that sets them all (what `serve --print-config` shows).
func printConfig(w io.Writer, fs *flag.FlagSet, s settings) {
	if s.file != "" {
		fmt.Fprintf(w, "# agentstream serve: the configuration in effect (read %s, the environment and the command line)\n", s.file)
	} else {
		fmt.Fprintln(w, "# agentstream serve: the configuration in effect (the environment and the command line over the defaults)")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || f.Name == "print-config" {
			return
		}
		v := printedValue(f.Name, f.Value.String())
		if v == "" { // unset (a list flag takes no empty item)
			fmt.Fprintf(w, "# %s = \"\"\n", f.Name)
			return
		}
		switch fmt.Sprintf("%T", f.Value) {
		case "*flag.boolValue", "*flag.intValue", "*flag.int64Value", "*flag.uintValue", "*flag.uint64Value", "*flag.float64Value":
			fmt.Fprintf(w, "%s = %s\n", f.Name, v)
		default:
			fmt.Fprintf(w, "%s = %s\n", f.Name, tomlString(v))
		}
	})
}

// secretFlags are the flags whose values are secrets: printed as REDACTED.
var secretFlags = map[string]bool{"upstream-api-key": true}

// urlFlags are the flags whose values are URLs (comma-separated for a
// Redis Cluster's seeds) that may carry a password: printed with it
// REDACTED.
var urlFlags = map[string]bool{"redis": true, "upstream": true, "auth-jwks-url": true}

// printedValue is a flag's value as --print-config shows it: secrets
// redacted.
func printedValue(name, v string) string {
	switch {
	case v == "":
		return v
	case secretFlags[name]:
		return "REDACTED"
	case urlFlags[name]:
		parts := strings.Split(v, ",")
		for i, p := range parts {
			parts[i] = auth.RedactURL(p)
		}
		return strings.Join(parts, ",")
	}
	return v
}

// tomlString is s as a TOML basic string.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
