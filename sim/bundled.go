package sim

import (
	"bytes"
	_ "embed"
	"fmt"
)

//go:embed traces/AzureLLMInferenceTrace_code.csv
var bundledCode []byte

// BundledTraceName names the trace embedded in the binary (see
// sim/traces/README.md for its origin and CC-BY 4.0 attribution).
const BundledTraceName = "AzureLLMInferenceTrace_code.csv (Azure LLM inference trace 2023, CC-BY 4.0, Patel et al., Splitwise, ISCA 2024)"

// BundledTrace returns the embedded Azure code trace, arrivals relative to
// its first request.
func BundledTrace() ([]Request, error) {
	reqs, err := ReadTrace(bytes.NewReader(bundledCode))
	if err != nil {
		return nil, fmt.Errorf("sim: bundled trace: %w", err)
	}
	return reqs, nil
}
