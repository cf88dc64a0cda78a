#!/bin/sh
# Regenerates gen/ from proto/ and fails when the committed code differs.
# Installs the pinned generators when they are missing (protoc from
# Debian's protobuf-compiler; the plugins with go install).
set -eu
cd "$(dirname "$0")/.."
if ! command -v protoc >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null && apt-get install -y -qq protobuf-compiler >/dev/null
  else
    echo "check-gen: protoc is missing (apt-get install protobuf-compiler)"; exit 1
  fi
fi
GOFLAGS= go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
GOFLAGS= go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
go generate ./proto
if ! git diff --exit-code --stat -- gen/ || [ -n "$(git status --porcelain -- gen/)" ]; then
  echo "check-gen: gen/ differs from what proto/ generates; run make proto and commit"
  git status --porcelain -- gen/
  exit 1
fi
echo "check-gen: gen/ is up to date"
