package longlived

// Shallow keeps a long-lived goroutine's stack small. A goroutine that
// serves a connection for hours keeps, while it waits, the largest stack
// it ever grew; decoding, validating and encoding a
// command grows one to tens of kilobytes. Shallow does such work on a
// short-lived goroutine and waits for it, so the deep stack goes with that
// goroutine and the long-lived one stays at its first 2 KiB. It costs a
// goroutine start, a few hundred nanoseconds: for work done once per
// command or request, not per event.
//
// Shallow calls f on a goroutine of its own, waits for it and returns its
// result. A panic in f is not recovered: it ends the program, as it would
// have on the caller's goroutine.
func Shallow[T any](f func() T) T {
	out := make(chan T, 1) // buffered: the worker never waits for the reader
	go func() { out <- f() }()
	return <-out
}
