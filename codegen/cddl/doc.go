// Package cddl reads CDDL (RFC 8610): a lexer and a parser for the whole
// Appendix B grammar ([Parse], to a [Schema] whose every node carries its
// [Pos]) and a resolver ([Resolve]) that binds names against the schema and
// the standard prelude, merges `/=` and `//=` extensions and socket plugs,
// and reports undefined names and duplicate rules. Errors are an
// [ErrorList] of positioned [Error]s; [FormatError] shows each with its
// source line and a caret. Package codegen lowers what it resolves and
// generates code from it.
//
// # Documentation comments
//
// A block of comment lines directly above a rule or a group member (no blank
// line between the block and the declaration) is that declaration's
// documentation. A comment that follows a member on its own line (after the
// member and its optional comma) documents that member when it has no block
// above it. Every other comment is ignored.
package cddl
