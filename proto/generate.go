// Package proto holds the versioned protobuf schema of the coordinator node
// (termivar/v1: the replicated log commands in command.proto and the public
// Connect API in api.proto). The generated Go lives in gen/ and is committed,
// so building needs no tools. Regenerate with one command from the module
// root:
//
//	go generate ./proto
//
// which runs scripts/genproto.sh (protoc 3.21+, protoc-gen-go v1.36.12,
// protoc-gen-connect-go v1.21.1).
package proto

//go:generate sh ../scripts/genproto.sh
