//go:build race

package daemon

// raceEnabled: the tests run with -race, so cri-compose is built with it too.
const raceEnabled = true
