package replay

import (
	"testing"

	"github.com/predictio/predictio/simulate"
)

func simulateDevice(t *testing.T) simulate.Device {
	p := ThisMachine
	d, err := simulate.DeviceFromProfile(&p)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
