#include "textflag.h"

// func addScaledAVX2(acc *float32, row *int8, n int, sc float32)
TEXT ·addScaledAVX2(SB), NOSPLIT, $0-28
	MOVQ acc+0(FP), DI
	MOVQ row+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS sc+24(FP), Y0
	XORQ AX, AX

	// Sixteen values a round while sixteen are left, then eight.
	MOVQ CX, DX
	ANDQ $-16, DX

loop16:
	CMPQ AX, DX
	JGE  tail8
	VPMOVSXBD (SI)(AX*1), Y1
	VPMOVSXBD 8(SI)(AX*1), Y2
	VCVTDQ2PS Y1, Y1
	VCVTDQ2PS Y2, Y2
	VMULPS    Y0, Y1, Y1
	VMULPS    Y0, Y2, Y2
	VADDPS    (DI)(AX*4), Y1, Y1
	VADDPS    32(DI)(AX*4), Y2, Y2
	VMOVUPS   Y1, (DI)(AX*4)
	VMOVUPS   Y2, 32(DI)(AX*4)
	ADDQ      $16, AX
	JMP       loop16

tail8:
	CMPQ AX, CX
	JGE  done
	VPMOVSXBD (SI)(AX*1), Y1
	VCVTDQ2PS Y1, Y1
	VMULPS    Y0, Y1, Y1
	VADDPS    (DI)(AX*4), Y1, Y1
	VMOVUPS   Y1, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       tail8

done:
	VZEROUPPER
	RET
