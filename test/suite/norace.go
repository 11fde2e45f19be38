//go:build !race

package suite

// RaceEnabled: the tests run without -race, and so do the binaries.
const RaceEnabled = false
