//go:build race

package suite

// RaceEnabled: the tests run with -race, so the binaries they run are
// built with it too (a data race in a crash path then shows up).
const RaceEnabled = true
