package kmod

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/predictio/predictio/policies"
)

func TestOpenNotLoaded(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "predictio")
	_, err := Open(WithDevice(dev))
	if !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("Open(%s) = %v, want ErrNotLoaded", dev, err)
	}
	for _, want := range []string{dev, "make -C kmod/module", "insmod", "docs/kmod.md"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestClosedBackend(t *testing.T) {
	b := &Backend{} // what Close leaves behind
	if _, err := b.Counters(); !errors.Is(err, ErrClosed) {
		t.Errorf("Counters on a closed backend: %v", err)
	}
	if err := b.Submit(&policies.Request{}); !errors.Is(err, ErrClosed) {
		t.Errorf("Submit on a closed backend: %v", err)
	}
	if err := b.Notify(); !errors.Is(err, ErrClosed) {
		t.Errorf("Notify on a closed backend: %v", err)
	}
	if st := b.Stats(); st != (policies.BackendStats{}) {
		t.Errorf("Stats on a never-used closed backend: %+v", st)
	}
	if err := b.Close(); err != nil {
		t.Errorf("Close twice: %v", err)
	}
}
