package engine

// cpuPause executes the x86 PAUSE instruction (a spin-wait hint).
//
//go:noescape
func cpuPause()
