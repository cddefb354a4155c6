#include "model/init.h"

#include <math.h>

/* splitmix64's finaliser: a bijection of 64-bit words with good avalanche. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

uint64_t tri_init_key(uint64_t seed, const char *name) {
    /* FNV-1a of the name, then mixed with the seed */
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return mix64(mix64(seed) ^ h);
}

double tri_init_uniform(uint64_t key, uint64_t i) {
    uint64_t z = mix64(key ^ mix64(i + 0x9e3779b97f4a7c15ULL));
    /* 53 random bits, shifted off zero */
    return ((double)(z >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

double tri_init_normal(uint64_t key, uint64_t i) {
    double u1 = tri_init_uniform(key, 2 * i);
    double u2 = tri_init_uniform(key, 2 * i + 1);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
