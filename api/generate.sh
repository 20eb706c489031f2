#!/bin/sh
# Regenerates the Go code for the agent protocols. Needs protoc,
# protoc-gen-go and protoc-gen-connect-go on PATH (see Makefile target proto).
set -eu
cd "$(dirname "$0")/.."
protoc -I . \
  --go_out=. --go_opt=module=github.com/spacesandbox/space \
  --connect-go_out=. --connect-go_opt=module=github.com/spacesandbox/space \
  api/envd/process/process.proto api/envd/filesystem/filesystem.proto api/agent/v1/agent.proto
