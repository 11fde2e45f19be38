//go:build !race

package daemon

// raceEnabled: the tests run without -race, and so does cri-compose.
const raceEnabled = false
