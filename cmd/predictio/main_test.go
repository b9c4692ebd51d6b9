package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/predictio/predictio/bench"
)

// TestMain points the device-profile cache at an empty directory, so that
// no test's predictions depend on the profiles this machine has cached
// ('bench device'); a test that wants one measures or writes it.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "predictio-cmd-test-profiles-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(bench.ProfileCacheEnv, dir)
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}
