package client_test

import (
	"bufio"
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/termivar/distributed/client"
	"github.com/termivar/distributed/client/clienttest"
)

// lines yields the non-empty lines of a reader, as a file or stdin would.
func lines(sc *bufio.Scanner) iter.Seq[string] {
	return func(yield func(string) bool) {
		for sc.Scan() {
			if t := strings.TrimSpace(sc.Text()); t != "" && !yield(t) {
				return
			}
		}
	}
}

// EnqueueTargets reads targets from any sequence, stores a repeated one
// once, and, run again with the same input, finds everything present.
func ExampleClient_EnqueueTargets() {
	srv, err := clienttest.New(clienttest.Options{})
	if err != nil {
		panic(err)
	}
	defer srv.Close()
	c, err := client.New(client.Config{ServerURL: srv.URL, Key: srv.Key})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	input := "a.example\nb.example\na.example\nc.example\n"
	for range 2 {
		res, err := c.EnqueueTargets(context.Background(), client.EnqueueOptions{ScanID: "s1", DeclaredTotal: 3},
			lines(bufio.NewScanner(strings.NewReader(input))))
		if err != nil {
			panic(err)
		}
		fmt.Printf("read %d: enqueued %d, already present %d, duplicates %d (position %v)\n",
			res.Read, res.Enqueued, res.Existing, res.Duplicates, res.DuplicatePositions)
	}
	// Output:
	// read 4: enqueued 3, already present 0, duplicates 1 (position [3])
	// read 4: enqueued 0, already present 3, duplicates 1 (position [3])
}
