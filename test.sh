#!/usr/bin/env bash
# Runs every test of the project, as CI does: installs the Node tools the
# Go tests drive (tsc), then runs all Go tests with the race detector.
# Missing tools fail the run instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")"

if [ ! -x tools/node/node_modules/.bin/tsc ]; then
  npm ci --prefix tools/node --no-audit --no-fund
fi
go mod download

# Data that lives beside the repository rather than in it: the tests that
# need it skip without it (go test -v names each skip).
if [ ! -d ../shared/cddl-corpus ]; then
  echo "note: ../shared/cddl-corpus is not beside the repository; these tests skip:"
  go test -count=1 -v -run 'Corpus|Gofmted' ./codegen | grep -e '--- SKIP' || true
fi

export AGENTSTREAM_REQUIRE_TOOLS=1
go vet ./...
go test -race -count=1 -timeout 20m ./...
