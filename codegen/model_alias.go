package codegen

import (
	"github.com/agentstream/agentstream/codegen/cddl"
	"github.com/agentstream/agentstream/codegen/model"
)

// The model and the options, as package model defines them: codegen is
// the one import a program that generates needs.
type (
	// Model is a lowered schema (model.Model).
	Model = model.Model
	// Warning is what a generator could not express exactly.
	Warning = model.Warning
	// Options configure a generator (model.Options).
	Options = model.Options
	// Lang is a generator target.
	Lang = model.Lang
	// FieldCase is how member names are written on the wire.
	FieldCase = model.FieldCase
	// AnyUse is a rule whose Go output holds an any, with why.
	AnyUse = model.AnyUse
)

// The targets and field cases.
const (
	LangGo         = model.LangGo
	LangJSONSchema = model.LangJSONSchema
	LangTS         = model.LangTS
	LangPython     = model.LangPython

	CasePreserve = model.CasePreserve
	CaseSnake    = model.CaseSnake
	CaseCamel    = model.CaseCamel

	// AnyInSchema is the reason of an any the schema asks for.
	AnyInSchema = model.AnyInSchema
)

// Langs lists every target.
var Langs = model.Langs

// ParseLang reads a target name.
func ParseLang(s string) (Lang, error) { return model.ParseLang(s) }

// ParseFieldCase reads "preserve", "snake" or "camel".
func ParseFieldCase(s string) (FieldCase, error) { return model.ParseFieldCase(s) }

// Lower turns a resolved schema into the Model the generators share
// (model.Lower).
func Lower(res *cddl.Resolved) *Model { return model.Lower(res) }
