//go:build race

package server

// raceEnabled: the race detector slows code 5-10x and multiplies memory,
// so TestServer_HostileLoad widens its bounds.
const raceEnabled = true
