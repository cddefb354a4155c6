/* Buffers that the emulator tests hand to kernels: device memory of the
 * emulated runtime (tests/cuemu/cuemu_rt.h), which is host memory that the
 * test reads and writes directly. A launch refuses any pointer argument
 * outside a live device allocation (docs/cuda_emulation.md), so a test
 * allocates what a kernel sees here, not with malloc or on the stack.
 * dev_alloc leaves the runtime's 0xff fill (NaN as float), dev_calloc
 * zeroes; both abort on failure. dev_free takes NULL. */
#ifndef TRI_TESTS_CUEMU_DEV_MEM_H
#define TRI_TESTS_CUEMU_DEV_MEM_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuemu/cuemu_rt.h"

static inline void *dev_alloc(size_t bytes) {
    void *p = NULL;
    if (tri_cuemu_rt_malloc_async(&p, bytes, NULL) != cudaSuccess) {
        fprintf(stderr, "dev_alloc: %zu bytes of emulated device memory could not be allocated\n", bytes);
        abort();
    }
    return p;
}

static inline void *dev_calloc(size_t n, size_t size) {
    if (size != 0 && n > SIZE_MAX / size) {
        fprintf(stderr, "dev_calloc: %zu x %zu bytes overflow\n", n, size);
        abort();
    }
    void *p = dev_alloc(n * size);
    memset(p, 0, n * size);
    return p;
}

static inline void dev_free(void *p) {
    if (tri_cuemu_rt_free_async(p, NULL) != cudaSuccess) {
        fprintf(stderr, "dev_free: %p is not a live emulated device allocation\n", p);
        abort();
    }
}

#endif
