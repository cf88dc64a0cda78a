module github.com/termivar/distributed

go 1.26

require github.com/google/btree v1.1.3

require pgregory.net/rapid v1.3.0 // indirect
