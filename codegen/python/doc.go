// Package python generates a Python module (typed dicts and aliases)
// from a [model.Model].
package python
