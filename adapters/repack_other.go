//go:build !amd64

package adapters

// hostRepack returns RepackNone: the repack rules of other CPUs (Arm's
// NEON and i8mm paths) are not modelled.
func hostRepack() string { return RepackNone }
