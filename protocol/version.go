package protocol

// Version is the version of protocol.cddl, the wire format this package
// and the bindings describe. The binding packages carry it as theirs
// (bindings/ts/package.json, bindings/python/pyproject.toml; a test checks
// that they agree): change it, and theirs, when the schema changes.
const Version = "0.1.0"
