module github.com/termivar/distributed

go 1.26
