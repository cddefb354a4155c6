/* Hashing for the data layer's hash maps (tokenizer, BPE training). Internal. */
#ifndef TRI_DATA_HASH_H
#define TRI_DATA_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* splitmix64's finaliser: a bijection with good avalanche. */
static inline uint64_t tri_mix64(uint64_t h) {
    h ^= h >> 30;
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 27;
    h *= 0x94D049BB133111EBull;
    h ^= h >> 31;
    return h;
}

/* A 64-bit hash of n bytes, 8 at a time. */
static inline uint64_t tri_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        h = tri_mix64(h ^ v);
        p += 8;
        n -= 8;
    }
    uint64_t v = 0;
    if (n) memcpy(&v, p, n); /* p may be NULL when n == 0 (an empty file has no mapping) */
    return tri_mix64(h ^ v ^ 0x5851F42D4C957F2Dull);
}

#endif
