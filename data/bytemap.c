#include "data/bytemap.h"

#include <stdlib.h>
#include <string.h>

#include "data/hash.h"

int tri_bmap_init(tri_bmap *m, size_t cap) {
    memset(m, 0, sizeof *m);
    size_t c = 64;
    while (c < cap) c *= 2;
    m->slot = calloc(c, sizeof *m->slot);
    if (!m->slot) return -1;
    m->cap = c;
    return 0;
}

void tri_bmap_free(tri_bmap *m) {
    if (!m) return;
    free(m->slot);
    free(m->pool);
    memset(m, 0, sizeof *m);
}

void tri_bmap_clear(tri_bmap *m) {
    memset(m->slot, 0, m->cap * sizeof *m->slot);
    m->count = 0;
    m->pool_len = 0;
}

uint64_t tri_bmap_hash(const uint8_t *k, size_t n) { return tri_hash_bytes(k, n) | 1u; }

int64_t *tri_bmap_find(const tri_bmap *m, const uint8_t *k, size_t n, uint64_t h) {
    size_t mask = m->cap - 1;
    for (size_t i = (size_t)(h >> 7) & mask;; i = (i + 1) & mask) {
        tri_bmap_slot *s = &m->slot[i];
        if (s->hash == 0) return NULL;
        if (s->hash == h && s->len == n && memcmp(m->pool + s->off, k, n) == 0) return &s->val;
    }
}

static int grow(tri_bmap *m) {
    size_t nc = m->cap * 2;
    tri_bmap_slot *ns = calloc(nc, sizeof *ns);
    if (!ns) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slot[i].hash) continue;
        size_t j = (size_t)(m->slot[i].hash >> 7) & (nc - 1);
        while (ns[j].hash) j = (j + 1) & (nc - 1);
        ns[j] = m->slot[i];
    }
    free(m->slot);
    m->slot = ns;
    m->cap = nc;
    return 0;
}

int64_t *tri_bmap_upsert(tri_bmap *m, const uint8_t *k, size_t n, uint64_t h, int64_t init) {
    int64_t *v = tri_bmap_find(m, k, n, h);
    if (v) return v;
    if (2 * (m->count + 1) > m->cap && grow(m)) return NULL;
    if (m->pool_len + n > m->pool_cap) {
        size_t nc = m->pool_cap ? m->pool_cap : 4096;
        while (nc < m->pool_len + n) nc *= 2;
        uint8_t *np = realloc(m->pool, nc);
        if (!np) return NULL;
        m->pool = np;
        m->pool_cap = nc;
    }
    if (n) memcpy(m->pool + m->pool_len, k, n);
    size_t mask = m->cap - 1;
    size_t i = (size_t)(h >> 7) & mask;
    while (m->slot[i].hash) i = (i + 1) & mask;
    m->slot[i].hash = h;
    m->slot[i].off = m->pool_len;
    m->slot[i].len = (uint32_t)n;
    m->slot[i].val = init;
    m->pool_len += n;
    m->count++;
    return &m->slot[i].val;
}
