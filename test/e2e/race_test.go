//go:build race

package e2e

// raceEnabled: the tests run with -race, so cri-compose is built with it too.
const raceEnabled = true
