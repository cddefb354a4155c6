/* OpenBLAS's kernel choice, checked once at start-up.
 *
 * OpenBLAS (a DYNAMIC_ARCH build, as Debian's) picks its sgemm kernels from
 * the CPU model when the library loads. A model newer than the library falls
 * back to its generic "Prescott" (SSE3) kernels: Debian's 0.3.21 on Intel's
 * Sapphire and Emerald Rapids runs sgemm 3-4x below the AVX-512 kernels it
 * carries (docs/performance.md). The choice is made in the library's
 * constructor, before main, and read from OPENBLAS_CORETYPE only then; so
 * the fix is to set it and start the program again. */
#ifndef TRI_BLAS_H
#define TRI_BLAS_H

/* Call first thing in main(). When OpenBLAS fell back to "Prescott" on a CPU
 * whose features its SkylakeX (AVX-512 F/BW/DQ/VL) or Haswell (AVX2 + FMA)
 * kernels need, and neither OPENBLAS_CORETYPE nor TRIDENT_BLAS_AUTO=0 is set,
 * sets OPENBLAS_CORETYPE and re-executes the program with the same argv (the
 * same process, so launchers see nothing). Returns when nothing needed doing,
 * or when the re-execution failed (then OpenBLAS's choice stands). */
void tri_blas_pick_kernels(char **argv);

/* The kernels OpenBLAS runs, e.g. "SkylakeX" (openblas_get_corename). */
const char *tri_blas_kernels(void);

#endif
