// Package privs checks the capabilities eBPF tracing needs, naming every
// one that is missing.
package privs

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability numbers (linux/capability.h).
const (
	CapSysAdmin = 21
	CapPerfmon  = 38
	CapBPF      = 39
)

// ErrPermission is wrapped by Check's error.
var ErrPermission = errors.New("missing capabilities")

// Effective returns the calling thread's effective capability set.
func Effective() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return uint64(data[0].Effective) | uint64(data[1].Effective)<<32, nil
}

// Missing names the tracing capabilities absent from eff: CAP_BPF and
// CAP_PERFMON (Linux 5.8), each of which CAP_SYS_ADMIN replaces.
func Missing(eff uint64) []string {
	has := func(c uint) bool { return eff&(1<<c) != 0 }
	admin := has(CapSysAdmin)
	var miss []string
	if !has(CapBPF) && !admin {
		miss = append(miss, "CAP_BPF")
	}
	if !has(CapPerfmon) && !admin {
		miss = append(miss, "CAP_PERFMON")
	}
	return miss
}

// Check returns an error naming every missing tracing capability, for
// what (e.g. "observe the page cache").
func Check(what string) error {
	eff, err := Effective()
	if err != nil {
		return err
	}
	if miss := Missing(eff); len(miss) > 0 {
		return fmt.Errorf("%s: %s: %w; run as root or grant them with setcap", what, strings.Join(miss, ", "), ErrPermission)
	}
	return nil
}
