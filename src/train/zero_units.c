/* ZeRO-3's units: parameters gathered a few layers at a time. See
 * src/train/zero_units.h. */
#include "train/zero_units.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

enum { U_OFF, U_GATHERING, U_HELD };

typedef struct zunit {
    size_t lo, hi;   /* the tensors it holds: offsets in [lo, hi) of the chunk's buffer */
    size_t wlo, whi; /* its window: whole buckets [b0, b1), bounds[b0] = wlo, bounds[b1] = whi */
    int b0, b1;
    int state;
    void *buf;     /* (whi - wlo) elements of the param dtype while not U_OFF */
    tri_req *reqs; /* [b1 - b0] */
} zunit;

typedef struct zchunk {
    struct zero_units *z;
    int k;
    int per;      /* layers per unit (the chunk's n_layers for unit_layers 0) */
    int n;        /* layer units                                               */
    zunit *units; /* [n + 2]: the layer units, then the head and the embedding */
    int has_head, has_emb;
    int emb_first; /* the embedding unit read first in the forward (the embedding) */
    int emb_last;  /* and by the head (the tied LM head)                           */
    int cur;       /* the layer unit of the layer last announced; -1: none yet  */
    int keep;      /* a forward begun with keep                                 */
    int whole;     /* unit_layers 0: one unit, the whole buffer                 */
} zchunk;

struct zero_units {
    tri_gpt *g;
    tri_grad_sync *sync;
    tri_ctx *ctx;
    zchunk *chunks; /* [g->n_chunks] */
    size_t bytes;   /* gathered now */
};

/* ---- where the units lie in a chunk's buffer ---- */

/* End of parameter i (the next one's offset: tensors are 16-aligned). */
static size_t param_end(const tri_chunk *ch, int i) {
    return i + 1 < ch->n_params ? ch->params[i + 1].offset : ch->n_elems;
}

/* The head's tensors end (the first layer tensor begins) at H; layer i's
 * tensors (chunk-local) are [lo, hi); the embedding's begin at E. */
static size_t head_end(const tri_chunk *ch) {
    return ch->head_params < ch->n_params ? ch->params[ch->head_params].offset : ch->n_elems;
}
static size_t layer_hi(const tri_chunk *ch, int i) { return param_end(ch, ch->layer_last_param[i]); }
static size_t layer_lo(const tri_chunk *ch, int i) { return i + 1 < ch->n_layers ? layer_hi(ch, i + 1) : head_end(ch); }
static size_t emb_begin(const tri_chunk *ch) { return ch->n_layers > 0 ? layer_hi(ch, 0) : head_end(ch); }

/* The tensor ranges of chunk k's units into u ([n + 2]: layer units, head,
 * embedding; a missing end gets lo == hi); returns n. */
static int unit_ranges(const tri_chunk *ch, int unit_layers, zunit *u) {
    if (unit_layers <= 0) {
        u[0].lo = 0;
        u[0].hi = ch->n_alloc;
        u[1].lo = u[1].hi = u[2].lo = u[2].hi = 0;
        return 1;
    }
    int n = (ch->n_layers + unit_layers - 1) / unit_layers;
    for (int j = 0; j < n; j++) {
        int first = j * unit_layers, last = first + unit_layers - 1;
        if (last >= ch->n_layers) last = ch->n_layers - 1;
        u[j].lo = layer_lo(ch, last); /* the layers lie from last to first */
        u[j].hi = layer_hi(ch, first);
    }
    u[n].lo = 0;
    u[n].hi = head_end(ch);
    u[n + 1].lo = emb_begin(ch);
    u[n + 1].hi = emb_begin(ch) < ch->n_elems ? ch->n_alloc : emb_begin(ch);
    return n;
}

static int max_units(const tri_chunk *ch) { return ch->n_layers + 3; }

int zero_units_cut(const tri_gpt *g, tri_grad_sync *sync, int unit_layers, double bucket_mb) {
    if (unit_layers <= 0) return 0; /* one unit, the whole buffer: every bucket edge will do */
    for (int k = 0; k < g->n_chunks; k++) {
        const tri_chunk *ch = &g->chunks[k];
        zunit *u = calloc((size_t)max_units(ch), sizeof *u);
        size_t *cuts = calloc((size_t)max_units(ch) * 2, sizeof *cuts);
        if (!u || !cuts) {
            free(u);
            free(cuts);
            return tri_error("out of memory (ZeRO-3 units)");
        }
        int n = unit_ranges(ch, unit_layers, u), nc = 0;
        for (int j = 0; j < n + 2; j++) {
            cuts[nc++] = u[j].lo;
            cuts[nc++] = u[j].hi;
        }
        int rc = tri_grad_sync_recut(&sync[k], cuts, nc, bucket_mb);
        free(u);
        free(cuts);
        if (rc != 0) return -1;
    }
    return 0;
}

/* The bucket whose edge is at, or -1. */
static int bucket_at(const tri_grad_sync *s, size_t at) {
    for (int b = 0; b <= s->n_buckets; b++)
        if (s->bounds[b] == at) return b;
    return -1;
}

/* ---- gathering ---- */

static size_t esz_of(const zero_units *z, int k) { return tri_dtype_size(z->g->chunks[k].param_dtype); }

static zunit *head_unit(zchunk *zc) { return zc->has_head ? &zc->units[zc->n] : NULL; }
static zunit *emb_unit(zchunk *zc) { return zc->has_emb ? &zc->units[zc->n + 1] : NULL; }

/* Starts gathering u of chunk k into a new buffer (nothing when it is held
 * or on its way), its tensors' views pointed there. */
static void ustart(zero_units *z, int k, zunit *u) {
    if (!u || u->state != U_OFF) return;
    tri_grad_sync *s = &z->sync[k];
    const size_t esz = esz_of(z, k), bytes = (u->whi - u->wlo) * esz;
    u->buf = tri_ctx_alloc(z->ctx, bytes, TRI_MEM_PARAMS, "parameters (ZeRO-3: one unit's, gathered)");
    if (!u->buf) TRI_FAIL("no memory to gather a unit of chunk %d's parameters (ZeRO-3)", k);
    z->bytes += bytes;
    for (int b = u->b0; b < u->b1; b++)
        tri_grad_sync_gather_into(s, b, (char *)u->buf + (s->bounds[b] - u->wlo) * esz, &u->reqs[b - u->b0]);
    tri_gpt_params_view(z->g, k, u->lo, u->hi, u->buf, u->wlo);
    u->state = U_GATHERING;
}

/* u gathered. */
static void uneed(zero_units *z, int k, zunit *u) {
    if (!u) return;
    ustart(z, k, u);
    if (u->state == U_GATHERING)
        for (int b = u->b0; b < u->b1; b++) tri_comm_wait(z->sync[k].dp, &u->reqs[b - u->b0]);
    u->state = U_HELD;
}

/* u released (after its gather completed), its views at nothing. */
static void udrop(zero_units *z, int k, zunit *u) {
    if (!u || u->state == U_OFF) return;
    if (u->state == U_GATHERING)
        for (int b = u->b0; b < u->b1; b++) tri_comm_wait(z->sync[k].dp, &u->reqs[b - u->b0]);
    tri_gpt_params_view(z->g, k, u->lo, u->hi, NULL, 0);
    const size_t bytes = (u->whi - u->wlo) * esz_of(z, k);
    tri_ctx_release(z->ctx, u->buf, bytes, TRI_MEM_PARAMS);
    z->bytes -= bytes;
    u->buf = NULL;
    u->state = U_OFF;
}

/* The units chunk c needs first, started: forward the embedding and the
 * first layer unit; backward the head and the last layer unit. */
static void start_first(zero_units *z, int c, int backward) {
    zchunk *zc = &z->chunks[c];
    if (!backward) {
        if (zc->emb_first) ustart(z, c, emb_unit(zc));
        if (zc->n > 0) ustart(z, c, &zc->units[0]);
    } else {
        ustart(z, c, head_unit(zc));
        if (zc->n > 0) ustart(z, c, &zc->units[zc->n - 1]);
    }
}

/* The runtime's hook: chunk-local layer i is about to run (the forward's
 * head when i is the chunk's n_layers). */
static void before_layer(void *ctx, int i, int backward) {
    zchunk *zc = ctx;
    zero_units *z = zc->z;
    if (zc->whole) return; /* gathered whole at the chunk's start */
    const int c = zc->k, u = i / zc->per;
    if (!backward && i == z->g->chunks[c].n_layers) { /* the head, after the last layer unit */
        if (zc->cur >= 0 && !zc->keep) udrop(z, c, &zc->units[zc->cur]);
        zc->cur = -1;
        uneed(z, c, head_unit(zc));
        if (zc->emb_last) uneed(z, c, emb_unit(zc));
        return;
    }
    if (u == zc->cur) return;
    if (zc->cur >= 0 && (backward || !zc->keep)) udrop(z, c, &zc->units[zc->cur]);
    /* the forward's first layer: the embedding has run (the tied head reads it again) */
    if (!backward && zc->cur < 0 && !zc->keep && !zc->emb_last) udrop(z, c, emb_unit(zc));
    uneed(z, c, &zc->units[u]);
    if (!backward) {
        if (u + 1 < zc->n) {
            ustart(z, c, &zc->units[u + 1]);
        } else { /* the last unit: the head's turn comes next, then the next chunk's */
            ustart(z, c, head_unit(zc));
            if (zc->emb_last) ustart(z, c, emb_unit(zc));
            if (c + 1 < z->g->n_chunks) start_first(z, c + 1, 0);
        }
    } else {
        if (u > 0)
            ustart(z, c, &zc->units[u - 1]);
        else if (c > 0)
            start_first(z, c - 1, 1);
    }
    zc->cur = u;
}

void zero_units_begin(zero_units *z, int c, int backward, int keep) {
    zchunk *zc = &z->chunks[c];
    zc->cur = -1;
    zc->keep = !backward && keep;
    start_first(z, c, backward);
    if (zc->whole) {
        uneed(z, c, &zc->units[0]);
        zc->cur = 0;
        return;
    }
    if (backward)
        uneed(z, c, head_unit(zc));
    else if (zc->emb_first)
        uneed(z, c, emb_unit(zc));
}

void zero_units_end(zero_units *z, int c) {
    zchunk *zc = &z->chunks[c];
    if (zc->keep) return;
    for (int j = 0; j < zc->n + 2; j++) udrop(z, c, &zc->units[j]);
    zc->cur = -1;
}

void zero_units_release_all(zero_units *z) {
    if (!z) return;
    for (int c = 0; c < z->g->n_chunks; c++) {
        zchunk *zc = &z->chunks[c];
        zc->keep = 0;
        zero_units_end(z, c);
    }
}

size_t zero_units_bytes(const zero_units *z) { return z ? z->bytes : 0; }

zero_units *zero_units_new(tri_gpt *g, tri_grad_sync *sync, tri_ctx *ctx, int unit_layers) {
    zero_units *z = calloc(1, sizeof *z);
    if (!z || !(z->chunks = calloc((size_t)g->n_chunks, sizeof *z->chunks))) {
        free(z);
        tri_error("out of memory (ZeRO-3 units)");
        return NULL;
    }
    z->g = g;
    z->sync = sync;
    z->ctx = ctx;
    for (int k = 0; k < g->n_chunks; k++) {
        tri_chunk *ch = &g->chunks[k];
        zchunk *zc = &z->chunks[k];
        zc->z = z;
        zc->k = k;
        zc->cur = -1;
        zc->whole = unit_layers <= 0;
        zc->per = zc->whole ? (ch->n_layers > 0 ? ch->n_layers : 1) : unit_layers;
        zc->units = calloc((size_t)max_units(ch), sizeof *zc->units);
        if (!zc->units) goto oom;
        zc->n = unit_ranges(ch, unit_layers, zc->units);
        zc->has_head = zc->units[zc->n].hi > zc->units[zc->n].lo;
        zc->has_emb = zc->units[zc->n + 1].hi > zc->units[zc->n + 1].lo;
        zc->emb_first = zc->has_emb && ch->has_embedding;
        zc->emb_last = zc->has_emb && ch->has_head && g->tied;
        const size_t a = (size_t)sync[k].dp->size * TRI_ZERO_ALIGN;
        for (int j = 0; j < zc->n + 2; j++) {
            zunit *u = &zc->units[j];
            if (u->hi <= u->lo) continue;
            u->wlo = u->lo / a * a;
            u->whi = (u->hi + a - 1) / a * a;
            u->b0 = bucket_at(&sync[k], u->wlo);
            u->b1 = bucket_at(&sync[k], u->whi);
            if (u->b0 < 0 || u->b1 <= u->b0) {
                tri_error("internal error: ZeRO-3 unit [%zu, %zu) of chunk %d is not a run of whole buckets", u->lo,
                          u->hi, k);
                zero_units_free(z);
                return NULL;
            }
            u->reqs = calloc((size_t)(u->b1 - u->b0), sizeof *u->reqs);
            if (!u->reqs) goto oom;
        }
        ch->before_layer = before_layer;
        ch->before_layer_ctx = zc;
    }
    return z;
oom:
    tri_error("out of memory (ZeRO-3 units)");
    zero_units_free(z);
    return NULL;
}

void zero_units_free(zero_units *z) {
    if (!z) return;
    for (int k = 0; k < z->g->n_chunks; k++) {
        zchunk *zc = &z->chunks[k];
        if (!zc->units) continue;
        zc->keep = 0;
        zero_units_end(z, k);
        for (int j = 0; j < zc->n + 2; j++) free(zc->units[j].reqs);
        free(zc->units);
        z->g->chunks[k].before_layer = NULL;
        z->g->chunks[k].before_layer_ctx = NULL;
    }
    free(z->chunks);
    free(z);
}
