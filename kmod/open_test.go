package kmod

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
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
