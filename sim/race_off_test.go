//go:build !race

package sim

// raceDetector: see race_on_test.go.
const raceDetector = false
