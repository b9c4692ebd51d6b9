package replay

import (
	"testing"

	"github.com/predictio/predictio/simulate"
)

// simulateDevice is the prediction device of tests: the nvme preset,
// uncalibrated.
func simulateDevice(t *testing.T) Prediction {
	return Prediction{Device: simulate.Presets["nvme"]}
}
