// Package ts generates TypeScript declarations from a [model.Model].
package ts
