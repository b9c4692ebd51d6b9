#include "textflag.h"

// func prefetch3(a, b, c unsafe.Pointer)
TEXT ·prefetch3(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ a+0(FP), AX
	PREFETCHT0 (AX)
	MOVQ b+8(FP), AX
	PREFETCHT0 (AX)
	MOVQ c+16(FP), AX
	PREFETCHT0 (AX)
	RET

// func prefetch8(p0, p1, p2, p3, p4, p5, p6, p7 unsafe.Pointer)
TEXT ·prefetch8(SB), NOSPLIT|NOFRAME, $0-64
	MOVQ p0+0(FP), AX
	PREFETCHT0 (AX)
	MOVQ p1+8(FP), AX
	PREFETCHT0 (AX)
	MOVQ p2+16(FP), AX
	PREFETCHT0 (AX)
	MOVQ p3+24(FP), AX
	PREFETCHT0 (AX)
	MOVQ p4+32(FP), AX
	PREFETCHT0 (AX)
	MOVQ p5+40(FP), AX
	PREFETCHT0 (AX)
	MOVQ p6+48(FP), AX
	PREFETCHT0 (AX)
	MOVQ p7+56(FP), AX
	PREFETCHT0 (AX)
	RET
