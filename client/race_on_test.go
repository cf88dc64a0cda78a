//go:build race

package client_test

// raceEnabled: under the race detector sync.Pool drops items at random,
// so allocation counts are not ours (TestSession_CallAllocBudget skips).
const raceEnabled = true
