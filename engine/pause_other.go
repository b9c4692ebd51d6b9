//go:build !amd64

package engine

func cpuPause() {}
