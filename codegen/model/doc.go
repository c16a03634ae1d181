// Package model is the language-neutral form of a CDDL schema that every
// generator works from: [Lower] turns what package cddl resolved into a
// [Model] of declarations and [Shape]s (the splicing and group-choice
// idioms applied, unions flattened, discriminators found), and [Gen] is
// one generation of it (the [Options], the identifiers given to the
// declarations, the warnings and fallbacks recorded), which each
// generator package (golang, jsonschema, ts, python) embeds.
package model
