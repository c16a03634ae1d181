package jobs_test

import (
	"testing"

	"github.com/agentstream/agentstream/internal/testkit/gentest"
)

// TestGeneratedFilesAreFresh: doc.go's go:generate lines (the Go types
// and the JSON Schema) write what is in the package.
func TestGeneratedFilesAreFresh(t *testing.T) { gentest.Fresh(t, "doc.go", 2) }
