package adapters

import "golang.org/x/sys/cpu"

// hostRepack returns the repack model of this machine's CPU: the ggml CPU
// backend variant that node-llama-cpp loads is the one for the CPU's
// features.
func hostRepack() string {
	switch {
	case cpu.X86.HasAVX512F:
		return RepackAVX512
	case cpu.X86.HasAVX2:
		return RepackAVX2
	}
	return RepackNone
}
