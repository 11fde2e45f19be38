//go:build race

package churn

const raceEnabled = true
