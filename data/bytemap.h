/* A map from byte strings (copied into a pool) to int64, open addressing.
 * Internal to the data layer (tokenizer, BPE training). */
#ifndef TRI_DATA_BYTEMAP_H
#define TRI_DATA_BYTEMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct tri_bmap_slot {
    uint64_t hash; /* 0: empty (real hashes have bit 0 set) */
    size_t off;    /* key bytes at pool[off .. off + len)  */
    uint32_t len;
    int64_t val;
} tri_bmap_slot;

typedef struct tri_bmap {
    tri_bmap_slot *slot; /* (cap); iterate over it, skipping hash == 0 */
    size_t cap, count;
    uint8_t *pool; /* (pool_cap) */
    size_t pool_len, pool_cap;
} tri_bmap;

/* Room for about cap / 2 keys before the first growth. 0 or -1 (no memory). */
int tri_bmap_init(tri_bmap *m, size_t cap);
void tri_bmap_free(tri_bmap *m); /* NULL-safe, zeroes */
/* Empties the map, keeping its memory. */
void tri_bmap_clear(tri_bmap *m);
/* The hash to pass with key k[0, n) (never 0). */
uint64_t tri_bmap_hash(const uint8_t *k, size_t n);
/* The value of key k, or NULL. */
int64_t *tri_bmap_find(const tri_bmap *m, const uint8_t *k, size_t n, uint64_t h);
/* The value slot of key k, inserted with `init` if absent (valid until the
 * next insertion); NULL when out of memory. */
int64_t *tri_bmap_upsert(tri_bmap *m, const uint8_t *k, size_t n, uint64_t h, int64_t init);

#endif
