//go:build !race

package e2e

// raceEnabled: the tests run without -race, and so does cri-compose.
const raceEnabled = false
