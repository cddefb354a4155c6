/* Counter-based random numbers for layout-independent initialisation:
 * the value of a parameter element depends only on (seed, tensor name,
 * global element index), never on which rank computes it or in what order. */
#ifndef TRI_INIT_H
#define TRI_INIT_H

#include <stdint.h>

/* A 64-bit key for one tensor of one run. */
uint64_t tri_init_key(uint64_t seed, const char *name);
/* A uniform double in (0, 1) for counter i of key. */
double tri_init_uniform(uint64_t key, uint64_t i);
/* A standard normal for counter i of key (Box-Muller on counters 2i, 2i+1). */
double tri_init_normal(uint64_t key, uint64_t i);

#endif
