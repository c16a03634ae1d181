// Package jsonval compares decoded JSON values (what encoding/json gives
// for "any"), as the Platform API's searches do: numbers as numbers,
// whatever Go type holds them.
package jsonval

import "reflect"

// Equal reports whether a and b are the same JSON value.
func Equal(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case nil:
		return b == nil
	}
	if fa, ok := Number(a); ok {
		fb, ok := Number(b)
		return ok && fa == fb
	}
	return reflect.DeepEqual(a, b)
}

// Number is v as a float64; ok is false for a value that is no number.
func Number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int64:
		return float64(n), true
	}
	return 0, false
}
