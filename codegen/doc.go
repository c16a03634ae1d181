// Package codegen is agentstream's CDDL (RFC 8610) toolchain's entry
// point: over the syntax tree that package cddl parses and resolves, it
// lowers a schema to the language-neutral Model (package model) and runs
// one generator per target language (packages golang, jsonschema, ts and
// python). The command line is cmd/cddlgen (package cli).
//
// The package holds no global state; every entry point takes its input and
// options explicitly and is safe to call from several goroutines at once.
//
// # Entry points
//
//   - [cddl.Parse] turns CDDL source into a [cddl.Schema] (syntax only;
//     every node carries its [cddl.Pos]).
//   - [cddl.Resolve] binds names, merges `/=` and `//=` extensions and
//     socket plugs, and reports undefined names and duplicate rules.
//   - [Lower] turns a resolved schema into the language-neutral [Model] the
//     generators share.
//   - [Generate] runs one target over a model; [Compile] does all of the
//     above for a source file in one call.
//
// # Two idioms with defined semantics
//
// The agent streaming protocol's schema relies on two idioms that RFC 8610
// leaves to the reader; this toolchain gives them these meanings:
//
//  1. Splicing. A map rule (`A = { ... }`), or a group choice of map rules
//     (`C = A // B`), written as a bare entry inside a map
//     (`{ id: uint, C }`) contributes its members to the enclosing map, as
//     if its braces were removed. A group choice spliced this way makes the
//     enclosing map a choice of maps, one per alternative, each with the
//     enclosing members plus that alternative's.
//  2. Group choice as a type. A rule whose right-hand side is a group choice
//     (`C = A // B`) used where a type is expected (`data: C`) means the
//     type choice of its alternatives (`A / B`).
//
// # Fallbacks
//
// A construct a target cannot express exactly (a control operator it has no
// counterpart for, a tag, a computed literal) is generated as the nearest
// type that accepts every valid value, and the generator returns a
// [Warning] naming the rule and the construct. No rule is ever dropped
// without a warning.
package codegen
