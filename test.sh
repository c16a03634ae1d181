#!/usr/bin/env bash
# Runs every test of the project, as CI does: installs the Node tools the
# Go tests drive (tsc, the official SDK, Playwright, the LangGraph server), checks that go.mod is
# tidy, then runs all Go tests with the race detector. Tests that need what
# this machine lacks (redis-server, Chromium, ../shared) skip, and the last
# line names each; with AGENTSTREAM_REQUIRE_ALL=1 (as .ci/run sets) any
# skip fails the run.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x tools/node/node_modules/.bin/tsc ]; then
  npm ci --prefix tools/node --no-audit --no-fund
fi
# The LangGraph JavaScript server the edge-mode tests put agentstream in
# front of.
if [ ! -x tools/langgraph-upstream/node_modules/.bin/langgraphjs ]; then
  npm ci --prefix tools/langgraph-upstream --no-audit --no-fund
fi
go mod download

# Data that lives beside the repository rather than in it: the tests that
# need it skip without it (go test -v names each skip).
if [ ! -d ../shared/cddl-corpus ]; then
  echo "note: ../shared/cddl-corpus is not beside the repository; these tests skip:"
  go test -count=1 -v -run 'Corpus|Gofmted' ./codegen | grep -e '--- SKIP' || true
fi

export AGENTSTREAM_REQUIRE_TOOLS=1
go mod tidy -diff || { echo "go.mod or go.sum is not tidy: run go mod tidy" >&2; exit 1; }
go vet ./...
# One line per package, the output of each failed test, then last the
# failures again, one line each (test, package, first failing line), and a
# line naming every skipped test and why (redis-server, Chromium, ../shared);
# AGENTSTREAM_REQUIRE_ALL=1 (as .ci/run sets) makes any skip fail the run.
go build -o "${TMPDIR:-/tmp}/agentstream-testsummary" ./internal/testkit/testsummary
set +e
go test -race -count=1 -timeout 20m -json ./... | "${TMPDIR:-/tmp}/agentstream-testsummary"
codes=("${PIPESTATUS[@]}")
set -e
[ "${codes[0]}" -eq 0 ] && [ "${codes[1]}" -eq 0 ]
