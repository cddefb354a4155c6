/* The BPE engine of the byte-level tokenizer: the pair -> rank table, BPE
 * of one pre-token (a rank scan for short words, a heap for long ones), the
 * per-thread encode cache, encode, decode, and building a tokenizer from
 * merges. Loading and saving files are in data/tok/vocab.c, the
 * pre-tokenizer in data/tok/unicode.c, training in data/tok/train.c. */
#include "data/tok/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "data/bytemap.h"
#include "data/hash.h"
#include "data/tok/internal.h"

/* ---- pair -> rank table ----------------------------------------------------- */

static uint64_t pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

/* Rank of the merge (a, b), or -1. */
static int32_t pair_rank(const tri_tokenizer *tk, int32_t a, int32_t b) {
    if (!tk->pair_cap) return -1;
    uint64_t key = pair_key(a, b);
    size_t mask = tk->pair_cap - 1;
    for (size_t i = (size_t)tri_mix64(key) & mask;; i = (i + 1) & mask) {
        if (tk->pair_key[i] == key) return tk->pair_rank[i];
        if (tk->pair_key[i] == UINT64_MAX) return -1;
    }
}

/* Fills the pair table from tk->merges; a repeated pair keeps its first rank. */
int tri_tok_build_pair_table(tri_tokenizer *tk) {
    size_t cap = 16;
    while (cap < 2 * (size_t)tk->n_merges + 2) cap *= 2;
    tk->pair_key = malloc(cap * sizeof *tk->pair_key);
    tk->pair_rank = malloc(cap * sizeof *tk->pair_rank);
    if (!tk->pair_key || !tk->pair_rank) return -1;
    memset(tk->pair_key, 0xFF, cap * sizeof *tk->pair_key);
    tk->pair_cap = cap;
    for (int r = 0; r < tk->n_merges; r++) {
        uint64_t key = pair_key(tk->merges[3 * (size_t)r], tk->merges[3 * (size_t)r + 1]);
        size_t i = (size_t)tri_mix64(key) & (cap - 1);
        while (tk->pair_key[i] != UINT64_MAX && tk->pair_key[i] != key) i = (i + 1) & (cap - 1);
        if (tk->pair_key[i] == key) continue;
        tk->pair_key[i] = key;
        tk->pair_rank[i] = r;
    }
    return 0;
}

/* ---- whole-word table (ignore_merges) --------------------------------------------- */

static size_t tok_len(const tri_tokenizer *tk, int id) { return tk->tok_off[id + 1] - tk->tok_off[id]; }

int tri_tok_build_word_table(tri_tokenizer *tk) {
    size_t cap = 16;
    while (cap < 2 * (size_t)tk->vocab_size + 2) cap *= 2;
    free(tk->word_id);
    tk->word_id = malloc(cap * sizeof *tk->word_id);
    if (!tk->word_id) return -1;
    memset(tk->word_id, 0xFF, cap * sizeof *tk->word_id);
    tk->word_cap = cap;
    for (int id = 0; id < tk->vocab_size; id++) {
        if ((tk->flags[id] & (TRI_TOK_PRESENT | TRI_TOK_ADDED)) != TRI_TOK_PRESENT) continue;
        const uint8_t *b = tk->tok_bytes + tk->tok_off[id];
        size_t n = tok_len(tk, id), i = (size_t)tri_bmap_hash(b, n) & (cap - 1);
        while (tk->word_id[i] >= 0) i = (i + 1) & (cap - 1);
        tk->word_id[i] = id;
    }
    return 0;
}

/* The id of the regular token whose bytes are w[0, n), or -1. */
static int32_t word_lookup(const tri_tokenizer *tk, const uint8_t *w, size_t n) {
    size_t mask = tk->word_cap - 1;
    for (size_t i = (size_t)tri_bmap_hash(w, n) & mask;; i = (i + 1) & mask) {
        int32_t id = tk->word_id[i];
        if (id < 0) return -1;
        if (tok_len(tk, id) == n && memcmp(tk->tok_bytes + tk->tok_off[id], w, n) == 0) return id;
    }
}

/* ---- added tokens matched in the text ------------------------------------------------ */

/* An added token the text is searched for. */
static int matchable(const tri_tokenizer *tk, int id) {
    return tk->flags[id] & TRI_TOK_ADDED && tok_len(tk, id) > 0 &&
           !(tk->split_special && tk->flags[id] & TRI_TOK_SPECIAL);
}

int tri_tok_build_added(tri_tokenizer *tk) {
    free(tk->added_ord);
    free(tk->added_start);
    free(tk->added_pairs);
    tk->added_ord = NULL;
    tk->n_added = 0;
    tk->added_start = calloc(2 * 257, sizeof *tk->added_start);
    tk->added_pairs = calloc(2 * 8192, 1);
    int n = 0;
    for (int id = 0; id < tk->vocab_size; id++)
        if (matchable(tk, id)) n++;
    tk->added_ord = malloc((size_t)(n ? n : 1) * sizeof *tk->added_ord);
    if (!tk->added_start || !tk->added_ord || !tk->added_pairs) return -1;
    /* counting sort by (set, first byte), then longest first within a bucket */
    for (int id = 0; id < tk->vocab_size; id++)
        if (matchable(tk, id)) {
            int set = (tk->flags[id] & TRI_TOK_NORMALIZED) != 0;
            tk->added_start[257 * set + tk->tok_bytes[tk->tok_off[id]] + 1]++;
        }
    for (int k = 1; k < 2 * 257; k++) tk->added_start[k] += tk->added_start[k - 1];
    uint32_t fill[2 * 257];
    memcpy(fill, tk->added_start, sizeof fill);
    for (int id = 0; id < tk->vocab_size; id++)
        if (matchable(tk, id)) {
            int set = (tk->flags[id] & TRI_TOK_NORMALIZED) != 0;
            const uint8_t *b = tk->tok_bytes + tk->tok_off[id];
            for (unsigned x = 0; x < 256; x++) /* the first two bytes; any second one after a 1-byte token */
                if (tok_len(tk, id) == 1 || x == b[1]) {
                    unsigned k = (unsigned)b[0] << 8 | x;
                    tk->added_pairs[8192 * set + (k >> 3)] |= (uint8_t)(1u << (k & 7));
                }
            uint32_t at = fill[257 * set + b[0]]++;
            while (at > tk->added_start[257 * set + tk->tok_bytes[tk->tok_off[id]]] &&
                   tok_len(tk, tk->added_ord[at - 1]) < tok_len(tk, id)) {
                tk->added_ord[at] = tk->added_ord[at - 1];
                at--;
            }
            tk->added_ord[at] = id;
        }
    tk->n_added = n;
    return 0;
}

/* The leftmost, then longest, added token of set `set` in s[pos, len):
 * returns its offset (len if none) and sets *id. */
static size_t find_added(const tri_tokenizer *tk, int set, const uint8_t *s, size_t len, size_t pos, int32_t *id) {
    const uint32_t *st = tk->added_start + 257 * set;
    const uint8_t *pairs = tk->added_pairs + 8192 * set;
    if (st[256] == st[0]) return len;
    for (size_t i = pos; i < len; i++) {
        uint32_t a = st[s[i]], b = st[s[i] + 1];
        if (a == b) continue;
        if (i + 1 < len) { /* no token starts with these two bytes: "<d" in HTML, for Llama 3's "<|...|>" */
            unsigned k = (unsigned)s[i] << 8 | s[i + 1];
            if (!(pairs[k >> 3] >> (k & 7) & 1)) continue;
        }
        for (uint32_t k = a; k < b; k++) {
            int32_t t = tk->added_ord[k];
            size_t n = tok_len(tk, t);
            if (n <= len - i && memcmp(s + i, tk->tok_bytes + tk->tok_off[t], n) == 0) {
                *id = t;
                return i;
            }
        }
    }
    return len;
}

int tri_tok_append_added(tri_tokenizer *tk, const char *s, int special) {
    size_t n = strlen(s), used = tk->tok_off[tk->vocab_size];
    int id = tk->vocab_size;
    uint8_t *fl = realloc(tk->flags, (size_t)id + 1);
    if (fl) tk->flags = fl;
    size_t *off = realloc(tk->tok_off, ((size_t)id + 2) * sizeof *off);
    if (off) tk->tok_off = off;
    uint8_t *tb = realloc(tk->tok_bytes, used + n + 1);
    if (tb) tk->tok_bytes = tb;
    if (!fl || !off || !tb) return -1;
    memcpy(tk->tok_bytes + used, s, n);
    tk->tok_off[id + 1] = used + n;
    tk->flags[id] = (uint8_t)(TRI_TOK_PRESENT | TRI_TOK_ADDED | (special ? TRI_TOK_SPECIAL : 0));
    tk->vocab_size++;
    return id;
}

/* ---- BPE of one pre-token ------------------------------------------------------ */

#define SMALL_WORD 64

/* Words up to SMALL_WORD bytes: repeated scans over a rank array. */
static size_t bpe_small(const tri_tokenizer *tk, const uint8_t *w, size_t n, int32_t *out) {
    int32_t sym[SMALL_WORD], rk[SMALL_WORD];
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = tk->byte_id[w[i]];
    for (size_t i = 0; i + 1 < m; i++) rk[i] = pair_rank(tk, sym[i], sym[i + 1]);
    for (;;) {
        int32_t best = INT32_MAX;
        size_t bi = SIZE_MAX;
        for (size_t i = 0; i + 1 < m; i++)
            if (rk[i] >= 0 && rk[i] < best) {
                best = rk[i];
                bi = i;
            }
        if (bi == SIZE_MAX) break;
        sym[bi] = tk->merges[3 * (size_t)best + 2];
        memmove(sym + bi + 1, sym + bi + 2, (m - bi - 2) * sizeof *sym);
        if (m >= bi + 3) memmove(rk + bi + 1, rk + bi + 2, (m - bi - 3) * sizeof *rk);
        m--;
        if (bi > 0) rk[bi - 1] = pair_rank(tk, sym[bi - 1], sym[bi]);
        if (bi + 1 < m) rk[bi] = pair_rank(tk, sym[bi], sym[bi + 1]);
    }
    memcpy(out, sym, m * sizeof *sym);
    return m;
}

static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= v) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (v <= h[c]) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

/* Long words: a linked list of symbols and a min-heap of (rank, position),
 * O(n log n). Same result as bpe_small: lowest rank first, leftmost on ties. */
static long bpe_long(const tri_tokenizer *tk, const uint8_t *w, size_t n, int32_t *out) {
    int32_t *sym = malloc(n * sizeof *sym);
    int64_t *prv = malloc(n * sizeof *prv), *nxt = malloc(n * sizeof *nxt);
    uint64_t *heap = malloc(3 * n * sizeof *heap); /* n - 1 initial + 2 per merge */
    if (!sym || !prv || !nxt || !heap) {
        free(sym), free(prv), free(nxt), free(heap);
        return -1;
    }
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        sym[i] = tk->byte_id[w[i]];
        prv[i] = (int64_t)i - 1;
        nxt[i] = i + 1 < n ? (int64_t)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        int32_t r = pair_rank(tk, sym[i], sym[i + 1]);
        if (r >= 0) heap_push(heap, &hn, ((uint64_t)r << 32) | i);
    }
    while (hn) {
        uint64_t top = heap_pop(heap, &hn);
        int32_t r = (int32_t)(top >> 32);
        size_t i = (size_t)(top & 0xFFFFFFFFu);
        if (sym[i] < 0 || nxt[i] < 0) continue;
        size_t j = (size_t)nxt[i];
        if (pair_rank(tk, sym[i], sym[j]) != r) continue; /* stale entry */
        sym[i] = tk->merges[3 * (size_t)r + 2];
        sym[j] = -1;
        nxt[i] = nxt[j];
        if (nxt[j] >= 0) prv[nxt[j]] = (int64_t)i;
        if (prv[i] >= 0) {
            size_t p = (size_t)prv[i];
            int32_t r2 = pair_rank(tk, sym[p], sym[i]);
            if (r2 >= 0) heap_push(heap, &hn, ((uint64_t)r2 << 32) | p);
        }
        if (nxt[i] >= 0) {
            int32_t r3 = pair_rank(tk, sym[i], sym[nxt[i]]);
            if (r3 >= 0) heap_push(heap, &hn, ((uint64_t)r3 << 32) | i);
        }
    }
    size_t m = 0;
    for (int64_t i = 0; i >= 0; i = nxt[i]) out[m++] = sym[i];
    free(sym), free(prv), free(nxt), free(heap);
    return (long)m;
}

/* ---- encode cache ---------------------------------------------------------------- */

#define CACHE_MAX_WORD    48
#define CACHE_MAX_ENTRIES (1u << 18)

struct tri_tokcache {
    tri_bmap map; /* word -> (offset into ids) << 8 | count */
    int32_t *ids; /* (cap) */
    size_t n, cap;
};

tri_tokcache *tri_tokcache_new(void) {
    tri_tokcache *c = calloc(1, sizeof *c);
    if (!c || tri_bmap_init(&c->map, 1u << 12)) {
        free(c);
        tri_error("tokenizer: out of memory for the encode cache");
        return NULL;
    }
    return c;
}

void tri_tokcache_free(tri_tokcache *c) {
    if (!c) return;
    tri_bmap_free(&c->map);
    free(c->ids);
    free(c);
}

/* ---- encode / decode ------------------------------------------------------------- */

int tri_tokenizer_vocab_size(const tri_tokenizer *tk) { return tk->vocab_size; }
int tri_tokenizer_eot(const tri_tokenizer *tk) { return tk->eot; }

int tri_tokenizer_bos(const tri_tokenizer *tk) {
    static const char bos[] = TRI_TOK_BOT_TEXT;
    for (int i = 0; i < tk->vocab_size; i++)
        if (tk->flags[i] & TRI_TOK_ADDED && tok_len(tk, i) == sizeof bos - 1 &&
            memcmp(tk->tok_bytes + tk->tok_off[i], bos, sizeof bos - 1) == 0)
            return i;
    return -1;
}

int tri_tokenizer_split_special(tri_tokenizer *tk, int split) {
    tk->split_special = split != 0;
    if (tk->match_added && tri_tok_build_added(tk)) {
        tri_error("tokenizer: out of memory");
        return -1;
    }
    return 0;
}

static int reserve_ids(int32_t **ids, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 256;
    while (nc < need) nc *= 2;
    int32_t *p = realloc(*ids, nc * sizeof *p);
    if (!p) return -1;
    *ids = p;
    *cap = nc;
    return 0;
}

/* Appends the ids of word w (n bytes) at out (room for n); returns the count or -1. */
static long encode_word(const tri_tokenizer *tk, tri_tokcache *c, const uint8_t *w, size_t n, int32_t *out) {
    if (n == 1) {
        out[0] = tk->byte_id[w[0]];
        return 1;
    }
    if (tk->ignore_merges) {
        int32_t id = word_lookup(tk, w, n);
        if (id >= 0) {
            out[0] = id;
            return 1;
        }
    }
    if (!c || n > CACHE_MAX_WORD) return n <= SMALL_WORD ? (long)bpe_small(tk, w, n, out) : bpe_long(tk, w, n, out);
    uint64_t h = tri_bmap_hash(w, n);
    int64_t *v = tri_bmap_find(&c->map, w, n, h);
    if (v) {
        size_t cnt = (size_t)(*v & 0xFF), off = (size_t)(*v >> 8);
        memcpy(out, c->ids + off, cnt * sizeof *out);
        return (long)cnt;
    }
    size_t m = bpe_small(tk, w, n, out);
    if (c->map.count >= CACHE_MAX_ENTRIES) {
        tri_bmap_clear(&c->map);
        c->n = 0;
    }
    if (reserve_ids(&c->ids, &c->cap, c->n + m)) return (long)m; /* caching is optional */
    v = tri_bmap_upsert(&c->map, w, n, h, 0);
    if (!v) return (long)m;
    memcpy(c->ids + c->n, out, m * sizeof *out);
    *v = (int64_t)((c->n << 8) | m);
    c->n += m;
    return (long)m;
}

/* Pre-tokenizes text[pos, len) and appends the BPE of every pre-token. */
static int encode_span(const tri_tokenizer *tk, tri_tokcache *cache, const char *text, size_t pos, size_t len,
                       int32_t **ids, size_t *n, size_t *cap) {
    const uint8_t *s = (const uint8_t *)text;
    while (pos < len) {
        size_t end = tri_tokenizer_pretoken_end_pat(tk->pattern, text, len, pos);
        if (reserve_ids(ids, cap, *n + (end - pos))) return -1;
        long m = encode_word(tk, cache, s + pos, end - pos, *ids + *n);
        if (m < 0) return -1;
        *n += (size_t)m;
        pos = end;
    }
    return 0;
}

/* Splits text[pos, len) at the added tokens of set `set` (and, for set 0,
 * the gaps again at those of set 1), encoding the gaps. */
static int encode_added(const tri_tokenizer *tk, tri_tokcache *cache, int set, const char *text, size_t pos, size_t len,
                        int32_t **ids, size_t *n, size_t *cap) {
    const uint8_t *s = (const uint8_t *)text;
    while (pos < len) {
        int32_t id = -1;
        size_t at = find_added(tk, set, s, len, pos, &id);
        int rc = set == 0 ? encode_added(tk, cache, 1, text, pos, at, ids, n, cap)
                          : encode_span(tk, cache, text, pos, at, ids, n, cap);
        if (rc) return -1;
        if (at == len) break;
        if (reserve_ids(ids, cap, *n + 1)) return -1;
        (*ids)[(*n)++] = id;
        pos = at + tok_len(tk, id);
    }
    return 0;
}

int tri_tokenizer_encode_append(const tri_tokenizer *tk, tri_tokcache *cache, const char *text, size_t len,
                                int32_t **ids, size_t *n, size_t *cap) {
    const uint8_t *s = (const uint8_t *)text;
    if (reserve_ids(ids, cap, *n + 1)) goto oom;
    if (tk->n_merges == 0 && !tk->ignore_merges && !tk->n_added) { /* every byte is a token */
        if (reserve_ids(ids, cap, *n + len)) goto oom;
        for (size_t i = 0; i < len; i++) (*ids)[*n + i] = tk->byte_id[s[i]];
        *n += len;
        return 0;
    }
    if (tk->n_added ? encode_added(tk, cache, 0, text, 0, len, ids, n, cap)
                    : encode_span(tk, cache, text, 0, len, ids, n, cap))
        goto oom;
    return 0;
oom:
    tri_error("tokenizer: out of memory while encoding %zu bytes", len);
    return -1;
}

size_t tri_tokenizer_encode(const tri_tokenizer *tk, const char *text, size_t len, int32_t **ids) {
    *ids = NULL;
    size_t n = 0, cap = 0;
    /* a cache pays off only when words repeat */
    tri_tokcache *c = len >= (1u << 16) ? tri_tokcache_new() : NULL;
    int rc = tri_tokenizer_encode_append(tk, c, text, len, ids, &n, &cap);
    tri_tokcache_free(c);
    if (rc) {
        free(*ids);
        *ids = NULL;
        return SIZE_MAX;
    }
    return n;
}

size_t tri_tokenizer_decode(const tri_tokenizer *tk, const int32_t *ids, size_t n, char **text) {
    *text = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= tk->vocab_size || !(tk->flags[id] & TRI_TOK_PRESENT)) {
            tri_error("token id %ld at position %zu is not in the vocabulary (size %d)", (long)id, i, tk->vocab_size);
            return SIZE_MAX;
        }
        total += tk->tok_off[id + 1] - tk->tok_off[id];
    }
    char *out = malloc(total + 1);
    if (!out) {
        tri_error("tokenizer: out of memory decoding %zu tokens", n);
        return SIZE_MAX;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t a = tk->tok_off[ids[i]], b = tk->tok_off[ids[i] + 1];
        memcpy(out + k, tk->tok_bytes + a, b - a);
        k += b - a;
    }
    out[k] = 0;
    *text = out;
    return k;
}

/* ---- construction ------------------------------------------------------------------ */

void tri_tokenizer_free(tri_tokenizer *tk) {
    if (!tk) return;
    free(tk->flags);
    free(tk->tok_off);
    free(tk->tok_bytes);
    free(tk->merges);
    free(tk->pair_key);
    free(tk->pair_rank);
    free(tk->word_id);
    free(tk->added_ord);
    free(tk->added_start);
    free(tk->added_pairs);
    memset(tk, 0, sizeof *tk);
}

void tri_tokenizer_bytes(tri_tokenizer *tk) {
    memset(tk, 0, sizeof *tk);
    tk->vocab_size = 256;
    tk->eot = -1;
    tk->flags = malloc(256);
    tk->tok_off = malloc(257 * sizeof *tk->tok_off);
    tk->tok_bytes = malloc(256);
    if (!tk->flags || !tk->tok_off || !tk->tok_bytes) {
        /* 2.6 KB: the contract says this cannot fail, so failing is fatal */
        tri_error("tokenizer: out of memory for the byte tokenizer");
        abort();
    }
    for (int b = 0; b < 256; b++) {
        tk->byte_id[b] = b;
        tk->flags[b] = TRI_TOK_PRESENT;
        tk->tok_off[b] = (size_t)b;
        tk->tok_bytes[b] = (uint8_t)b;
    }
    tk->tok_off[256] = 256;
}

static const char k_eot[] = TRI_TOK_EOT_TEXT;

int tri_tokenizer_from_merges(tri_tokenizer *tk, const int32_t *pairs, int n, int with_eot) {
    memset(tk, 0, sizeof *tk);
    tri_bmap bytes_to_id = {0};
    size_t max_ids = 256 + (size_t)(n > 0 ? n : 0) + 1;
    size_t pool_cap = 4096, pool_len = 0;
    tk->flags = calloc(max_ids, 1);
    tk->tok_off = malloc((max_ids + 1) * sizeof *tk->tok_off);
    tk->tok_bytes = malloc(pool_cap);
    tk->merges = malloc(3 * (size_t)(n > 0 ? n : 1) * sizeof *tk->merges);
    if (!tk->flags || !tk->tok_off || !tk->tok_bytes || !tk->merges || tri_bmap_init(&bytes_to_id, 2 * max_ids))
        goto oom;
    int nt = 0;
    tk->tok_off[0] = 0;
    for (int i = 0; i < 256; i++) {
        uint8_t b = tri_tok_base_byte(i);
        tk->tok_bytes[pool_len++] = b;
        tk->tok_off[i + 1] = pool_len;
        tk->flags[i] = TRI_TOK_PRESENT;
        tk->byte_id[b] = i;
        int64_t *v = tri_bmap_upsert(&bytes_to_id, &b, 1, tri_bmap_hash(&b, 1), i);
        if (!v) goto oom;
        nt++;
    }
    for (int k = 0; k < n; k++) {
        int32_t a = pairs[2 * (size_t)k], b = pairs[2 * (size_t)k + 1];
        if (a < 0 || a >= nt || b < 0 || b >= nt) {
            tri_error("tokenizer: merge %d (%ld, %ld) names an id outside [0, %d)", k, (long)a, (long)b, nt);
            tri_tokenizer_free(tk);
            tri_bmap_free(&bytes_to_id);
            return -1;
        }
        size_t la = tk->tok_off[a + 1] - tk->tok_off[a], lb = tk->tok_off[b + 1] - tk->tok_off[b];
        if (pool_len + la + lb > pool_cap) {
            while (pool_len + la + lb > pool_cap) pool_cap *= 2;
            uint8_t *np = realloc(tk->tok_bytes, pool_cap);
            if (!np) goto oom;
            tk->tok_bytes = np;
        }
        uint8_t *dst = tk->tok_bytes + pool_len;
        memmove(dst, tk->tok_bytes + tk->tok_off[a], la);
        memmove(dst + la, tk->tok_bytes + tk->tok_off[b], lb);
        int64_t *v = tri_bmap_upsert(&bytes_to_id, dst, la + lb, tri_bmap_hash(dst, la + lb), nt);
        if (!v) goto oom;
        if (*v == nt) { /* a new token */
            pool_len += la + lb;
            tk->tok_off[nt + 1] = pool_len;
            tk->flags[nt] = TRI_TOK_PRESENT;
            nt++;
        }
        tk->merges[3 * (size_t)k] = a;
        tk->merges[3 * (size_t)k + 1] = b;
        tk->merges[3 * (size_t)k + 2] = (int32_t)*v;
    }
    tk->n_merges = n > 0 ? n : 0;
    tk->eot = -1;
    if (with_eot) {
        size_t le = sizeof k_eot - 1;
        if (pool_len + le > pool_cap) {
            uint8_t *np = realloc(tk->tok_bytes, pool_len + le);
            if (!np) goto oom;
            tk->tok_bytes = np;
        }
        memcpy(tk->tok_bytes + pool_len, k_eot, le);
        pool_len += le;
        tk->tok_off[nt + 1] = pool_len;
        tk->flags[nt] = TRI_TOK_PRESENT | TRI_TOK_ADDED | TRI_TOK_SPECIAL;
        tk->eot = nt++;
    }
    tk->vocab_size = nt;
    tri_bmap_free(&bytes_to_id);
    if (tri_tok_build_pair_table(tk)) goto oom;
    return 0;
oom:
    tri_error("tokenizer: out of memory building %d merges", n);
    tri_bmap_free(&bytes_to_id);
    tri_tokenizer_free(tk);
    return -1;
}
