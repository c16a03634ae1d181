package cddl

import (
	"errors"
	"fmt"
	"strings"
)

// Error is a problem found in a CDDL source, with its position.
type Error struct {
	File string
	Pos  Pos
	Msg  string
}

func (e *Error) Error() string {
	file := e.File
	if file == "" {
		file = "<input>"
	}
	return fmt.Sprintf("%s:%d:%d: %s", file, e.Pos.Line, e.Pos.Col, e.Msg)
}

// ErrorList is every [Error] found in one pass, in source order.
type ErrorList []*Error

func (l ErrorList) Error() string {
	msgs := make([]string, len(l))
	for i, e := range l {
		msgs[i] = e.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap lets [errors.As] find each [*Error].
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// err returns the list as an error, or nil when it is empty.
func (l ErrorList) err() error {
	if len(l) == 0 {
		return nil
	}
	return l
}

// FormatError renders err for a terminal: each [*Error] as
// `file:line:col: message`, followed by its source line and a caret under
// the column. Errors of other kinds are rendered with their Error method.
func FormatError(err error, src []byte) string {
	list, ok := AsErrorList(err)
	if !ok {
		return err.Error()
	}
	lines := strings.Split(string(src), "\n")
	var b strings.Builder
	for _, e := range list {
		b.WriteString(e.Error())
		b.WriteByte('\n')
		if e.Pos.Line >= 1 && e.Pos.Line <= len(lines) {
			line := strings.TrimRight(lines[e.Pos.Line-1], "\r")
			b.WriteString("    ")
			b.WriteString(strings.ReplaceAll(line, "\t", " "))
			b.WriteString("\n    ")
			col := e.Pos.Col - 1
			if col > len(line) {
				col = len(line)
			}
			b.WriteString(strings.Repeat(" ", max(col, 0)))
			b.WriteString("^\n")
		}
	}
	return b.String()
}

// AsErrorList returns the schema errors err holds, one or a list; ok is
// false for an error of another kind.
func AsErrorList(err error) (ErrorList, bool) {
	var list ErrorList
	var one *Error
	switch {
	case errors.As(err, &list):
		return list, true
	case errors.As(err, &one):
		return ErrorList{one}, true
	}
	return nil, false
}
