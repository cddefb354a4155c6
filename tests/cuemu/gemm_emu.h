/* Test controls of the emulated GEMM executor (tests/cuemu/gemm_emu.c, the
 * GEMMs of the emulated backend "cuda-emu"). */
#ifndef TRI_TESTS_CUEMU_GEMM_EMU_H
#define TRI_TESTS_CUEMU_GEMM_EMU_H

#ifdef __cplusplus
extern "C" {
#endif

/* From now on in this process, the stand-in search finds no algorithm for the
 * epilogues of epilogue_mask (bits 1u << tri_gemm_epilogue) at a GEMM's first
 * call, as cuBLASLt may not: the executor answers TRI_GEMM_NO_ALGO and the
 * backend runs the unfused path (kernels/cuda/gemm.h). GEMMs already in a
 * plan cache keep their decision. 0 (the start) refuses none beyond what
 * cuBLASLt documents (gemm_emu.c). */
void tri_cuemu_gemm_refuse(unsigned epilogue_mask);

#ifdef __cplusplus
}
#endif

#endif
