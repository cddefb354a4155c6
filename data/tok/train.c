/* BPE training (tri_tokenizer_train): count the unique pre-tokens of the
 * corpus, then the classic merge loop with incremental pair counts.
 *
 *   words   every distinct pre-token of >= 2 bytes, its count, and its
 *           current symbols (ids), merged in place;
 *   pairs   adjacent (left, right) ids -> count (summed over words, weighted
 *           by the word count) and the list of words it may occur in;
 *   heap    a max-heap of (count snapshot, pair). Counts of existing pairs
 *           only fall, except when a merge reuses an id; every pair whose
 *           count rose during a step is pushed again after it, so a popped
 *           entry whose snapshot equals the pair's current count is the best
 *           pair. Entries with an outdated snapshot are pushed back with the
 *           current count (lazy deletion).
 * Ties on count go to the pair with the smaller (left bytes, right bytes) in
 * lexicographic byte order; that total order makes the result independent
 * of thread count and hash-table order.
 */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "data/bytemap.h"
#include "data/hash.h"
#include "data/text.h"
#include "data/tok/internal.h"
#include "data/tok/tokenizer.h"
#include "base/stop.h"
#include "base/err.h"

/* ---- per-thread word counts: a tri_bmap from word bytes to count ---------- */

/* Adds c to the count of word k (hash h). Returns 0 or -1 (out of memory). */
static int count_add(tri_bmap *m, const uint8_t *k, size_t n, uint64_t h, int64_t c) {
    int64_t *v = tri_bmap_upsert(m, k, n, h, 0);
    if (!v) return -1;
    *v += c;
    return 0;
}

/* Counts the pre-tokens (split by pattern) of >= 2 bytes in text[0, len) into m. */
static int count_words(tri_bmap *m, int pattern, const char *text, size_t len) {
    size_t pos = 0;
    while (pos < len) {
        size_t end = tri_tokenizer_pretoken_end_pat(pattern, text, len, pos);
        size_t n = end - pos;
        if (n >= 2 && n <= UINT32_MAX) {
            const uint8_t *w = (const uint8_t *)text + pos;
            if (count_add(m, w, n, tri_bmap_hash(w, n), 1)) return -1;
        }
        pos = end;
    }
    return 0;
}

/* ---- the merge loop's state ---------------------------------------------------- */

typedef struct occ_list {
    int32_t *w; /* (cap) word indices, possibly repeated or stale */
    uint32_t n, cap;
} occ_list;

typedef struct heap_ent {
    int64_t count;
    int32_t pair;
} heap_ent;

typedef struct trainer {
    /* words */
    size_t n_words;
    int32_t *sym;     /* symbol pool; word w is sym[w_off[w] .. + w_len[w]) */
    size_t *w_off;    /* (n_words) */
    uint32_t *w_len;  /* (n_words) */
    int64_t *w_cnt;   /* (n_words) */
    int32_t *w_stamp; /* (n_words) last merge that rewrote the word */
    /* tokens */
    int n_tok;
    uint8_t *tb;  /* token bytes pool (tb_cap) */
    size_t *toff; /* (max_tok + 1) */
    size_t tb_len, tb_cap;
    /* token bytes -> id, open addressing over ids, -1 empty */
    int32_t *tmap; /* (tmap_cap) */
    size_t tmap_cap;
    /* pairs */
    uint64_t *pkey; /* (pmap_cap) pair key, UINT64_MAX empty */
    int32_t *pidx;  /* (pmap_cap) */
    size_t pmap_cap;
    size_t n_pairs, pairs_cap;
    int32_t *pa, *pb; /* (pairs_cap) */
    int64_t *pcnt;    /* (pairs_cap) */
    int32_t *pstamp;  /* (pairs_cap) last merge step that raised the count */
    occ_list *pocc;   /* (pairs_cap) */
    /* heap */
    heap_ent *heap;
    size_t hn, hcap;
    /* pairs whose count rose in this step */
    int32_t *touched;
    size_t n_touched, touched_cap;
    int oom;
} trainer;

static void trainer_free(trainer *t) {
    free(t->sym);
    free(t->w_off);
    free(t->w_len);
    free(t->w_cnt);
    free(t->w_stamp);
    free(t->tb);
    free(t->toff);
    free(t->tmap);
    free(t->pkey);
    free(t->pidx);
    free(t->pa);
    free(t->pb);
    free(t->pcnt);
    free(t->pstamp);
    if (t->pocc)
        for (size_t i = 0; i < t->n_pairs; i++) free(t->pocc[i].w);
    free(t->pocc);
    free(t->heap);
    free(t->touched);
    memset(t, 0, sizeof *t);
}

static uint64_t pkey_of(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

static int pmap_grow(trainer *t) {
    size_t nc = t->pmap_cap ? t->pmap_cap * 2 : 1 << 16;
    uint64_t *nk = malloc(nc * sizeof *nk);
    int32_t *ni = malloc(nc * sizeof *ni);
    if (!nk || !ni) {
        free(nk), free(ni);
        return -1;
    }
    memset(nk, 0xFF, nc * sizeof *nk);
    for (size_t i = 0; i < t->pmap_cap; i++) {
        if (t->pkey[i] == UINT64_MAX) continue;
        size_t j = (size_t)tri_mix64(t->pkey[i]) & (nc - 1);
        while (nk[j] != UINT64_MAX) j = (j + 1) & (nc - 1);
        nk[j] = t->pkey[i];
        ni[j] = t->pidx[i];
    }
    free(t->pkey), free(t->pidx);
    t->pkey = nk;
    t->pidx = ni;
    t->pmap_cap = nc;
    return 0;
}

/* The index of pair (a, b), created with count 0 if new; -1 when out of memory. */
static int32_t pair_get(trainer *t, int32_t a, int32_t b) {
    uint64_t key = pkey_of(a, b);
    size_t mask = t->pmap_cap - 1, i = (size_t)tri_mix64(key) & mask;
    for (;; i = (i + 1) & mask) {
        if (t->pkey[i] == key) return t->pidx[i];
        if (t->pkey[i] == UINT64_MAX) break;
    }
    if (t->n_pairs == t->pairs_cap) {
        size_t nc = t->pairs_cap ? t->pairs_cap * 2 : 1 << 15;
        int32_t *na = realloc(t->pa, nc * sizeof *na);
        if (na) t->pa = na;
        int32_t *nb = realloc(t->pb, nc * sizeof *nb);
        if (nb) t->pb = nb;
        int64_t *ncnt = realloc(t->pcnt, nc * sizeof *ncnt);
        if (ncnt) t->pcnt = ncnt;
        int32_t *ns = realloc(t->pstamp, nc * sizeof *ns);
        if (ns) t->pstamp = ns;
        occ_list *no = realloc(t->pocc, nc * sizeof *no);
        if (no) t->pocc = no;
        if (!na || !nb || !ncnt || !ns || !no || t->n_pairs >= INT32_MAX) return -1;
        t->pairs_cap = nc;
    }
    int32_t p = (int32_t)t->n_pairs++;
    t->pa[p] = a;
    t->pb[p] = b;
    t->pcnt[p] = 0;
    t->pstamp[p] = -1;
    t->pocc[p] = (occ_list){0};
    t->pkey[i] = key;
    t->pidx[i] = p;
    if (2 * t->n_pairs > t->pmap_cap && pmap_grow(t)) return -1;
    return p;
}

static int occ_add(occ_list *o, int32_t w) {
    if (o->n && o->w[o->n - 1] == w) return 0;
    if (o->n == o->cap) {
        uint32_t nc = o->cap ? o->cap * 2 : 4;
        int32_t *nw = realloc(o->w, (size_t)nc * sizeof *nw);
        if (!nw) return -1;
        o->w = nw;
        o->cap = nc;
    }
    o->w[o->n++] = w;
    return 0;
}

/* -1, 0, 1: lexicographic order of the byte strings of tokens x and y */
static int tok_cmp(const trainer *t, int32_t x, int32_t y) {
    size_t lx = t->toff[x + 1] - t->toff[x], ly = t->toff[y + 1] - t->toff[y];
    int c = memcmp(t->tb + t->toff[x], t->tb + t->toff[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx < ly ? -1 : lx > ly;
}

/* 1 if heap entry x should be merged before y */
static int better(const trainer *t, heap_ent x, heap_ent y) {
    if (x.count != y.count) return x.count > y.count;
    int c = tok_cmp(t, t->pa[x.pair], t->pa[y.pair]);
    if (!c) c = tok_cmp(t, t->pb[x.pair], t->pb[y.pair]);
    return c < 0;
}

static int heap_push(trainer *t, int64_t count, int32_t pair) {
    if (t->hn == t->hcap) {
        size_t nc = t->hcap ? t->hcap * 2 : 1 << 15;
        heap_ent *nh = realloc(t->heap, nc * sizeof *nh);
        if (!nh) return -1;
        t->heap = nh;
        t->hcap = nc;
    }
    heap_ent e = {count, pair};
    size_t i = t->hn++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!better(t, e, t->heap[p])) break;
        t->heap[i] = t->heap[p];
        i = p;
    }
    t->heap[i] = e;
    return 0;
}

static heap_ent heap_pop(trainer *t) {
    heap_ent top = t->heap[0], e = t->heap[--t->hn];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= t->hn) break;
        if (c + 1 < t->hn && better(t, t->heap[c + 1], t->heap[c])) c++;
        if (!better(t, t->heap[c], e)) break;
        t->heap[i] = t->heap[c];
        i = c;
    }
    t->heap[i] = e;
    return top;
}

/* count of pair (a, b) += d in word w during merge step `step` */
static void pair_add(trainer *t, int32_t a, int32_t b, int64_t d, int32_t w, int32_t step) {
    int32_t p = pair_get(t, a, b);
    if (p < 0) {
        t->oom = 1;
        return;
    }
    t->pcnt[p] += d;
    if (d <= 0) return;
    if (occ_add(&t->pocc[p], w)) t->oom = 1;
    if (t->pstamp[p] != step) {
        t->pstamp[p] = step;
        if (t->n_touched == t->touched_cap) {
            size_t nc = t->touched_cap ? t->touched_cap * 2 : 1024;
            int32_t *nt = realloc(t->touched, nc * sizeof *nt);
            if (!nt) {
                t->oom = 1;
                return;
            }
            t->touched = nt;
            t->touched_cap = nc;
        }
        t->touched[t->n_touched++] = p;
    }
}

/* The id of the token with bytes s[0, n), or -1; *slot gets its table slot. */
static int32_t tok_find(const trainer *t, const uint8_t *s, size_t n, size_t *slot) {
    size_t mask = t->tmap_cap - 1, i = (size_t)tri_bmap_hash(s, n) & mask;
    for (;; i = (i + 1) & mask) {
        int32_t id = t->tmap[i];
        if (id < 0) break;
        size_t l = t->toff[id + 1] - t->toff[id];
        if (l == n && memcmp(t->tb + t->toff[id], s, n) == 0) return id;
    }
    *slot = i;
    return -1;
}

/* Makes the token a+b (new id, or the existing one with those bytes). */
static int32_t make_token(trainer *t, int32_t a, int32_t b) {
    size_t la = t->toff[a + 1] - t->toff[a], lb = t->toff[b + 1] - t->toff[b];
    if (t->tb_len + la + lb > t->tb_cap) {
        size_t nc = t->tb_cap * 2;
        while (nc < t->tb_len + la + lb) nc *= 2;
        uint8_t *nb = realloc(t->tb, nc);
        if (!nb) return -1;
        t->tb = nb;
        t->tb_cap = nc;
    }
    uint8_t *dst = t->tb + t->tb_len;
    memcpy(dst, t->tb + t->toff[a], la);
    memcpy(dst + la, t->tb + t->toff[b], lb);
    size_t slot;
    int32_t id = tok_find(t, dst, la + lb, &slot);
    if (id >= 0) return id;
    id = t->n_tok++;
    t->tb_len += la + lb;
    t->toff[id + 1] = t->tb_len;
    t->tmap[slot] = id;
    return id;
}

/* Rewrites every occurrence of (a, b) as x in word w (step = merge index). */
static void merge_word(trainer *t, int32_t w, int32_t a, int32_t b, int32_t x, int32_t step) {
    int32_t *s = t->sym + t->w_off[w];
    size_t n = t->w_len[w], out = 0;
    int64_t c = t->w_cnt[w];
    for (size_t i = 0; i < n;) {
        if (i + 1 < n && s[i] == a && s[i + 1] == b) {
            if (out > 0) {
                pair_add(t, s[out - 1], a, -c, w, step);
                pair_add(t, s[out - 1], x, c, w, step);
            }
            if (i + 2 < n) {
                pair_add(t, b, s[i + 2], -c, w, step);
                pair_add(t, x, s[i + 2], c, w, step);
            }
            pair_add(t, a, b, -c, w, step);
            s[out++] = x;
            i += 2;
        } else {
            s[out++] = s[i++];
        }
    }
    t->w_len[w] = (uint32_t)out;
}

/* Builds the word arrays from the merged count map and the initial pairs. */
static int setup(trainer *t, const tri_bmap *m, int max_tok) {
    t->n_words = m->count;
    size_t total = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slot[i].hash) total += m->slot[i].len;
    size_t nw = t->n_words ? t->n_words : 1;
    t->sym = malloc((total ? total : 1) * sizeof *t->sym);
    t->w_off = malloc(nw * sizeof *t->w_off);
    t->w_len = malloc(nw * sizeof *t->w_len);
    t->w_cnt = malloc(nw * sizeof *t->w_cnt);
    t->w_stamp = malloc(nw * sizeof *t->w_stamp);
    t->tb_cap = 1 << 16;
    t->tb = malloc(t->tb_cap);
    t->toff = malloc(((size_t)max_tok + 1) * sizeof *t->toff);
    t->tmap_cap = 1024;
    while (t->tmap_cap < 2 * (size_t)max_tok) t->tmap_cap *= 2;
    t->tmap = malloc(t->tmap_cap * sizeof *t->tmap);
    if (!t->sym || !t->w_off || !t->w_len || !t->w_cnt || !t->w_stamp || !t->tb || !t->toff || !t->tmap || pmap_grow(t))
        return -1;
    memset(t->tmap, 0xFF, t->tmap_cap * sizeof *t->tmap);
    /* ids 0..255: the bytes in GPT-2's base order, as tri_tokenizer_from_merges
     * numbers them */
    tri_tokenizer base;
    if (tri_tokenizer_from_merges(&base, NULL, 0, 0)) return -1;
    t->toff[0] = 0;
    for (int i = 0; i < 256; i++) {
        t->tb[i] = base.tok_bytes[base.tok_off[i]];
        t->toff[i + 1] = (size_t)i + 1;
        size_t slot;
        if (tok_find(t, t->tb + i, 1, &slot) < 0) t->tmap[slot] = i;
    }
    t->tb_len = 256;
    t->n_tok = 256;
    size_t k = 0, w = 0;
    for (size_t i = 0; i < m->cap; i++) {
        const tri_bmap_slot *e = &m->slot[i];
        if (!e->hash) continue;
        t->w_off[w] = k;
        t->w_len[w] = e->len;
        t->w_cnt[w] = e->val;
        t->w_stamp[w] = -1;
        for (uint32_t j = 0; j < e->len; j++) t->sym[k + j] = base.byte_id[m->pool[e->off + j]];
        for (uint32_t j = 0; j + 1 < e->len; j++)
            pair_add(t, t->sym[k + j], t->sym[k + j + 1], t->w_cnt[w], (int32_t)w, -2);
        k += e->len;
        w++;
    }
    tri_tokenizer_free(&base);
    if (t->oom) return -1;
    for (size_t p = 0; p < t->n_pairs; p++)
        if (heap_push(t, t->pcnt[p], (int32_t)p)) return -1;
    t->n_touched = 0;
    return 0;
}

int tri_tokenizer_train(tri_tokenizer *tk, const char *const *files, int n_files, int vocab_size, int n_threads) {
    return tri_tokenizer_train_pat(tk, files, n_files, vocab_size, n_threads, TRI_TOK_PAT_GPT2);
}

int tri_tokenizer_train_pat(tri_tokenizer *tk, const char *const *files, int n_files, int vocab_size, int n_threads,
                            int pattern) {
    memset(tk, 0, sizeof *tk);
    int llama = pattern == TRI_TOK_PAT_LLAMA3, n_special = llama ? 2 : 1;
    if (vocab_size < 256 + n_special) {
        tri_error("tokenizer: vocab size %d is too small (>= %d: 256 bytes + %s)", vocab_size, 256 + n_special,
                  llama ? TRI_TOK_BOT_TEXT " and " TRI_TOK_EOT3_TEXT : TRI_TOK_EOT_TEXT);
        return -1;
    }
    if (n_files <= 0) {
        tri_error("tokenizer: no training files");
        return -1;
    }
    int nt = n_threads > 0 ? n_threads : omp_get_max_threads();
    tri_bmap *maps = calloc((size_t)nt, sizeof *maps);
    int32_t *merges = NULL;
    trainer t = {0};
    int rc = -1, n_merges = 0;
    if (!maps) goto oom;
    for (int i = 0; i < nt; i++)
        if (tri_bmap_init(&maps[i], 1 << 15)) goto oom;

    /* 1. count pre-tokens: blocks cut at safe points, each split into nt parts */
    for (int f = 0; f < n_files; f++) {
        tri_textblocks tb;
        if (tri_textblocks_open(&tb, files[f], (size_t)8 << 20, 0)) goto done;
        const char *text;
        size_t len;
        int r, fail = 0;
        while ((r = tri_textblocks_next(&tb, &text, &len)) == 1) {
            if (tri_stop_signal()) break;
            size_t cuts[257];
            int np = nt > 256 ? 256 : nt;
            cuts[0] = 0;
            for (int p = 1; p < np; p++) {
                size_t c = tri_tokenizer_cut_after(text, len, len / (size_t)np * (size_t)p);
                cuts[p] = c > cuts[p - 1] ? c : cuts[p - 1];
            }
            cuts[np] = len;
#pragma omp parallel for schedule(static, 1) num_threads(nt) reduction(| : fail)
            for (int p = 0; p < np; p++)
                if (count_words(&maps[omp_get_thread_num()], pattern, text + cuts[p], cuts[p + 1] - cuts[p])) fail = 1;
            if (fail) break;
        }
        if (tri_textblocks_close(&tb) && !tri_stop_signal()) goto done;
        if (tri_stop_signal()) goto stopped; /* before r: a signal may have ended xz too */
        if (r < 0) goto done;
        if (fail) goto oom;
    }
    for (int i = 1; i < nt; i++) {
        for (size_t s = 0; s < maps[i].cap; s++) {
            const tri_bmap_slot *e = &maps[i].slot[s];
            if (e->hash && count_add(&maps[0], maps[i].pool + e->off, e->len, e->hash, e->val)) goto oom;
        }
        tri_bmap_free(&maps[i]);
    }

    /* 2. merge loop */
    int max_tok = vocab_size - n_special; /* without the special tokens */
    if (setup(&t, &maps[0], max_tok)) goto oom;
    tri_bmap_free(&maps[0]);
    merges = malloc(2 * (size_t)vocab_size * sizeof *merges);
    if (!merges) goto oom;
    size_t merges_cap = (size_t)vocab_size;
    while (t.n_tok < max_tok && t.hn > 0) {
        if (tri_stop_signal()) goto stopped;
        heap_ent top = heap_pop(&t);
        int32_t p = top.pair;
        if (top.count != t.pcnt[p]) { /* outdated */
            if (t.pcnt[p] > 0 && heap_push(&t, t.pcnt[p], p)) goto oom;
            continue;
        }
        if (top.count <= 0) continue;
        int32_t a = t.pa[p], b = t.pb[p];
        int32_t x = make_token(&t, a, b);
        if (x < 0) goto oom;
        if ((size_t)n_merges == merges_cap) { /* ids were reused */
            int32_t *nm = realloc(merges, 4 * merges_cap * sizeof *nm);
            if (!nm) goto oom;
            merges = nm;
            merges_cap *= 2;
        }
        merges[2 * (size_t)n_merges] = a;
        merges[2 * (size_t)n_merges + 1] = b;
        int32_t step = n_merges++;
        occ_list occ = t.pocc[p];
        t.pocc[p] = (occ_list){0};
        t.n_touched = 0;
        for (uint32_t k = 0; k < occ.n; k++) {
            int32_t w = occ.w[k];
            if (t.w_stamp[w] == step) continue;
            t.w_stamp[w] = step;
            merge_word(&t, w, a, b, x, step);
        }
        free(occ.w);
        if (t.oom) goto oom;
        for (size_t k = 0; k < t.n_touched; k++) {
            int32_t q = t.touched[k];
            if (t.pcnt[q] > 0 && heap_push(&t, t.pcnt[q], q)) goto oom;
        }
    }
    if (tri_tokenizer_from_merges(tk, merges, n_merges, !llama)) goto done;
    if (llama) {
        tk->pattern = pattern;
        tk->match_added = 1;
        if (tri_tok_append_added(tk, TRI_TOK_BOT_TEXT, 1) < 0 ||
            (tk->eot = tri_tok_append_added(tk, TRI_TOK_EOT3_TEXT, 1)) < 0 || tri_tok_build_added(tk))
            goto oom;
    }
    rc = 0;
    goto done;
oom:
    tri_error("tokenizer: out of memory while training");
    goto done;
stopped:
    tri_error("tokenizer: %s: training stopped after %d merges; nothing written", tri_stop_name(tri_stop_signal()),
              n_merges);
done:
    if (maps)
        for (int i = 0; i < nt; i++) tri_bmap_free(&maps[i]);
    free(maps);
    free(merges);
    trainer_free(&t);
    if (rc) tri_tokenizer_free(tk);
    return rc;
}
