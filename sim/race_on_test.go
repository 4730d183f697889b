//go:build race

package sim

// raceDetector: the tests run under -race, where a simulation is about
// twenty times slower; the longest ones run fewer seeds there (the whole
// set runs in the plain go test ./...).
const raceDetector = true
