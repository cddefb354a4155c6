/* The CUDA runtime as the rest of Trident sees it (C, no CUDA headers):
 * whether this process can use a GPU, and why not. Built only when the CUDA
 * backend is (TRI_HAVE_CUDA). */
#ifndef TRI_CUDA_DEVICE_H
#define TRI_CUDA_DEVICE_H

#include <stddef.h>

/* 0 when the CUDA runtime finds a driver and at least one device; otherwise
 * -1 with what is missing in why[n]: "no CUDA driver (...)" or "no CUDA
 * device (...)", or the runtime's own error for anything else. Never aborts. */
int tri_cuda_probe(char *why, size_t n);

#endif
