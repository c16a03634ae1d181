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

export AGENTSTREAM_REQUIRE_TOOLS=1
go vet ./...
go test -race -count=1 -timeout 20m ./...
