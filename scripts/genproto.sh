#!/bin/sh
# Regenerates gen/ from proto/. Needs protoc (apt-get install protobuf-compiler),
# protoc-gen-go v1.36.12 and protoc-gen-connect-go v1.21.1 on PATH:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
set -eu
cd "$(dirname "$0")/.."
PATH="$(go env GOPATH)/bin:$PATH"
rm -rf gen
mkdir -p gen
protoc -I proto \
  --go_out=gen --go_opt=paths=source_relative \
  --connect-go_out=gen --connect-go_opt=paths=source_relative \
  proto/termivar/v1/*.proto
