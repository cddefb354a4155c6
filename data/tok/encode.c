/* The encode pipeline (data/tok/encode.h): text read in blocks, encoded by
 * all threads, written in order through the token-file writer. */
#include "data/tok/encode.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/clock.h"
#include "base/err.h"
#include "base/exit.h"
#include "base/log.h"
#include "base/status.h"
#include "base/stop.h"
#include "base/str.h"
#include "data/dataset.h"
#include "data/text.h"

#define BLOCK_BYTES ((size_t)16 << 20) /* text read and encoded at a time       */
#define SMALL_FILE  ((size_t)1 << 20)  /* plain files below this are read whole */
#define SPLIT_BLOCK ((size_t)1 << 20)  /* blocks below this are not split        */
#define BATCH_DOCS  4096               /* small documents encoded at a time      */

/* A growable array of token ids. */
typedef struct ivec {
    int32_t *ids; /* (cap) */
    size_t n, cap;
} ivec;

static int ivec_push(ivec *v, int32_t x) {
    if (v->n == v->cap) {
        size_t nc = v->cap ? v->cap * 2 : 1024;
        int32_t *p = realloc(v->ids, nc * sizeof *p);
        if (!p) return -1;
        v->ids = p;
        v->cap = nc;
    }
    v->ids[v->n++] = x;
    return 0;
}

/* ---- progress ---------------------------------------------------------------------- */

typedef struct progress {
    double t0, last;
    uint64_t total, done; /* bytes; total 0: unknown */
    int tty, quiet;
} progress;

static void fmt_eta(char *o, size_t n, double s) {
    if (!(s >= 0) || s > 1e7) {
        snprintf(o, n, "?");
        return;
    }
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(o, n, "%ldh%02ldm", t / 3600, (t / 60) % 60);
    else
        snprintf(o, n, "%ldm%02lds", t / 60, t % 60);
}

/* Redraws the progress line in place on a terminal (at most 4 times a
 * second), or prints a plain line every 5 s otherwise; final: the last
 * redraw on a terminal (a log gets the caller's summary instead). */
static void progress_show(progress *p, int final) {
    if (p->quiet) return;
    double now = tri_now_s();
    if (!final && now - p->last < (p->tty ? 0.25 : 5.0)) return;
    p->last = now;
    double el = now - p->t0, mb = (double)p->done / 1e6, rate = el > 0 ? mb / el : 0;
    char line[160];
    if (p->total) {
        char eta[32];
        fmt_eta(eta, sizeof eta, rate > 0 ? ((double)p->total / 1e6 - mb) / rate : -1);
        snprintf(line, sizeof line, "tokenize: %.1f / %.1f MB (%.0f%%), %.1f MB/s, ETA %s", mb, (double)p->total / 1e6,
                 100.0 * (double)p->done / (double)p->total, rate, eta);
    } else {
        snprintf(line, sizeof line, "tokenize: %.1f MB, %.1f MB/s", mb, rate);
    }
    if (p->tty) {
        tri_status_line(line, 1);
        if (final) tri_status_end();
    } else if (!final) {
        tri_status_line(line, 0);
    }
}

/* ---- the pipeline's state ------------------------------------------------------------ */

typedef struct enc_ctx {
    const tri_tokenizer *tk;
    tri_tokcache **cache; /* (nt) one per thread */
    int nt;
    int eot, eot_before; /* the separator; eot_before: llm.c (EOT, or BOS where the
                            tokenizer has one, first), else Megatron (EOT last) */
    tri_tokwriter *w;
    progress prog;
    ivec *parts; /* (n_parts) the parts of one block */
    int n_parts;
} enc_ctx;

/* One document per file, read block by block, each block split over the
 * threads. Returns TRI_EXIT_OK, _BAD_INPUT, _FAILURE or tri_exit_signal. */
static int encode_plain(enc_ctx *c, const char *path) {
    tri_textblocks tb;
    if (tri_textblocks_open(&tb, path, BLOCK_BYTES, 0)) return TRI_EXIT_BAD_INPUT;
    ivec doc = {0};
    int rc = TRI_EXIT_FAILURE, r, fail = 0;
    if (c->eot >= 0 && c->eot_before && ivec_push(&doc, c->eot)) goto oom;
    const char *text;
    size_t len;
    while ((r = tri_textblocks_next(&tb, &text, &len)) == 1) {
        if (tri_stop_signal()) {
            rc = tri_exit_signal(tri_stop_signal());
            goto done;
        }
        int np = len < SPLIT_BLOCK ? 1 : c->n_parts;
        size_t cuts[257];
        cuts[0] = 0;
        for (int p = 1; p < np; p++) {
            size_t q = tri_tokenizer_cut_after(text, len, len / (size_t)np * (size_t)p);
            cuts[p] = q > cuts[p - 1] ? q : cuts[p - 1];
        }
        cuts[np] = len;
#pragma omp parallel for schedule(dynamic, 1) num_threads(c->nt) reduction(| : fail)
        for (int p = 0; p < np; p++) {
            ivec *v = &c->parts[p];
            v->n = 0;
            if (tri_stop_signal()) continue; /* the block is dropped below */
            if (tri_tokenizer_encode_append(c->tk, c->cache[omp_get_thread_num()], text + cuts[p],
                                            cuts[p + 1] - cuts[p], &v->ids, &v->n, &v->cap))
                fail = 1;
        }
        if (fail) goto done;
        if (tri_stop_signal()) {
            rc = tri_exit_signal(tri_stop_signal());
            goto done;
        }
        for (int p = 0; p < np; p++) {
            const ivec *v = &c->parts[p];
            if (doc.n + v->n > doc.cap) {
                size_t nc = doc.cap ? doc.cap : 1024;
                while (nc < doc.n + v->n) nc *= 2;
                int32_t *nid = realloc(doc.ids, nc * sizeof *nid);
                if (!nid) goto oom;
                doc.ids = nid;
                doc.cap = nc;
            }
            memcpy(doc.ids + doc.n, v->ids, v->n * sizeof *v->ids);
            doc.n += v->n;
        }
        c->prog.done += len;
        progress_show(&c->prog, 0);
    }
    if (r < 0) {
        rc = TRI_EXIT_BAD_INPUT;
        goto done;
    }
    if (c->eot >= 0 && !c->eot_before && ivec_push(&doc, c->eot)) goto oom;
    if (tri_tokwriter_add_doc(c->w, doc.ids, doc.n)) goto done;
    rc = TRI_EXIT_OK;
    goto done;
oom:
    tri_error("%s: out of memory", path);
done:
    if (tri_textblocks_close(&tb) && rc == TRI_EXIT_OK) rc = TRI_EXIT_BAD_INPUT;
    free(doc.ids);
    return rc;
}

/* A document waiting to be encoded: its text is inside a parsed JSON line
 * (root) or a buffer of its own (buf). */
typedef struct doc {
    cJSON *root;
    char *buf;
    const char *text;
    size_t len;
    ivec ids;
} doc;

typedef struct doc_batch {
    doc *d; /* (cap) */
    size_t n, cap;
    size_t bytes;
} doc_batch;

static doc *batch_add(doc_batch *b) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 1024;
        doc *p = realloc(b->d, nc * sizeof *p);
        if (!p) return NULL;
        b->d = p;
        b->cap = nc;
    }
    doc *d = &b->d[b->n++];
    memset(d, 0, sizeof *d);
    return d;
}

static void batch_clear(doc_batch *b) {
    for (size_t i = 0; i < b->n; i++) {
        free(b->d[i].ids.ids);
        free(b->d[i].buf);
        cJSON_Delete(b->d[i].root);
    }
    b->n = 0;
    b->bytes = 0;
}

/* Encodes the batch's documents in parallel, then writes them in order with
 * their <|endoftext|>. Returns TRI_EXIT_OK, TRI_EXIT_FAILURE (out of memory,
 * write failure) or tri_exit_signal (a stop request: nothing of the batch
 * is written). */
static int batch_flush(enc_ctx *c, doc_batch *b) {
    int fail = 0;
#pragma omp parallel for schedule(dynamic, 4) num_threads(c->nt) reduction(| : fail)
    for (size_t i = 0; i < b->n; i++) {
        doc *d = &b->d[i];
        if (tri_stop_signal()) continue; /* the caller sees the request and drops the batch */
        if (c->eot >= 0 && c->eot_before && ivec_push(&d->ids, c->eot)) fail = 1;
        if (!fail && tri_tokenizer_encode_append(c->tk, c->cache[omp_get_thread_num()], d->text, d->len, &d->ids.ids,
                                                 &d->ids.n, &d->ids.cap))
            fail = 1;
        if (!fail && c->eot >= 0 && !c->eot_before && ivec_push(&d->ids, c->eot)) fail = 1;
    }
    int rc = fail ? TRI_EXIT_FAILURE : TRI_EXIT_OK;
    if (fail) tri_error("tokenize encode: out of memory");
    if (!fail && tri_stop_signal()) rc = tri_exit_signal(tri_stop_signal());
    for (size_t i = 0; i < b->n && rc == TRI_EXIT_OK; i++)
        if (tri_tokwriter_add_doc(c->w, b->d[i].ids.ids, b->d[i].ids.n)) rc = TRI_EXIT_FAILURE;
    c->prog.done += b->bytes;
    batch_clear(b);
    progress_show(&c->prog, 0);
    return rc;
}

/* Reads a whole (small) file into a new batch document. Returns TRI_EXIT_OK
 * or TRI_EXIT_BAD_INPUT. */
static int add_small_file(doc_batch *b, const char *path, size_t size) {
    tri_textfile tf;
    if (tri_textfile_open(&tf, path)) return TRI_EXIT_BAD_INPUT;
    doc *d = batch_add(b);
    char *buf = d ? malloc(size + 1) : NULL;
    size_t got = buf ? tri_textfile_read(&tf, buf, size + 1) : SIZE_MAX;
    int rc = tri_textfile_close(&tf);
    if (!d || !buf) {
        tri_error("%s: out of memory", path);
        free(buf);
        if (d) b->n--;
        return TRI_EXIT_BAD_INPUT;
    }
    d->buf = buf;
    if (got == SIZE_MAX || rc) return TRI_EXIT_BAD_INPUT;
    if (got > size) { /* the file grew while we read it */
        tri_error("%s: the file changed while being read", path);
        return TRI_EXIT_BAD_INPUT;
    }
    d->text = buf;
    d->len = got;
    b->bytes += got;
    return TRI_EXIT_OK;
}

/* One document per line of a JSON Lines file, in batches of one block.
 * Returns TRI_EXIT_OK, _BAD_INPUT, _FAILURE or tri_exit_signal. */
static int encode_jsonl(enc_ctx *c, const char *path, doc_batch *b) {
    tri_textblocks tb;
    if (tri_textblocks_open(&tb, path, BLOCK_BYTES, 1)) return TRI_EXIT_BAD_INPUT;
    long line_no = 0;
    int rc = TRI_EXIT_FAILURE, r;
    const char *text;
    size_t len;
    while ((r = tri_textblocks_next(&tb, &text, &len)) == 1) {
        if (tri_stop_signal()) {
            rc = tri_exit_signal(tri_stop_signal());
            goto done;
        }
        for (size_t pos = 0; pos < len;) {
            const char *ln = text + pos, *nl = memchr(ln, '\n', len - pos);
            size_t ll = nl ? (size_t)(nl - ln) : len - pos;
            pos += ll + (nl != NULL);
            line_no++;
            size_t k = 0;
            while (k < ll && (ln[k] == ' ' || ln[k] == '\t' || ln[k] == '\r')) k++;
            if (k == ll) continue; /* blank line */
            doc *d = batch_add(b);
            if (!d) {
                tri_error("%s: out of memory", path);
                goto done;
            }
            d->root = cJSON_ParseWithLength(ln, ll);
            if (!d->root || !cJSON_IsObject(d->root)) {
                tri_error("%s: line %ld: not a JSON object", path, line_no);
                rc = TRI_EXIT_BAD_INPUT;
                goto done;
            }
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(d->root, "text");
            if (!cJSON_IsString(t)) {
                tri_error("%s: line %ld: no \"text\" string", path, line_no);
                rc = TRI_EXIT_BAD_INPUT;
                goto done;
            }
            d->text = t->valuestring;
            d->len = strlen(t->valuestring);
        }
        b->bytes = len;
        int f = batch_flush(c, b);
        if (f != TRI_EXIT_OK) {
            rc = f;
            goto done;
        }
    }
    rc = r < 0 ? TRI_EXIT_BAD_INPUT : TRI_EXIT_OK;
done:
    batch_clear(b);
    if (tri_textblocks_close(&tb) && rc == TRI_EXIT_OK) rc = TRI_EXIT_BAD_INPUT;
    return rc;
}

/* ---- the pipeline ------------------------------------------------------------------- */

/* Small plain files are read whole and encoded many at a time; big (or
 * compressed) ones block by block, each block split over the threads. */
static int encode_all(enc_ctx *c, const tri_encode_cfg *cfg, const char *const *files, int n_files) {
    doc_batch batch = {0};
    int rc = TRI_EXIT_OK;
    for (int f = 0; f < n_files && rc == TRI_EXIT_OK; f++) {
        if (tri_stop_signal()) {
            rc = tri_exit_signal(tri_stop_signal());
            break;
        }
        struct stat st;
        size_t size = stat(files[f], &st) == 0 ? (size_t)st.st_size : SIZE_MAX;
        if (cfg->jsonl) {
            rc = encode_jsonl(c, files[f], &batch);
        } else if (size < SMALL_FILE && !tri_ends_with(files[f], ".xz")) {
            rc = add_small_file(&batch, files[f], size);
            if (rc == TRI_EXIT_OK && (batch.bytes >= BLOCK_BYTES || batch.n >= BATCH_DOCS)) rc = batch_flush(c, &batch);
        } else {
            rc = batch.n ? batch_flush(c, &batch) : TRI_EXIT_OK;
            if (rc == TRI_EXIT_OK) rc = encode_plain(c, files[f]);
        }
    }
    if (rc == TRI_EXIT_OK && batch.n) rc = batch_flush(c, &batch);
    batch_clear(&batch);
    free(batch.d);
    return rc;
}

int tri_encode_files(const tri_encode_cfg *cfg, const char *const *files, int n_files, tri_encode_stats *st) {
    TRI_CHECK(cfg != NULL && cfg->tk != NULL && st != NULL && (files != NULL || n_files == 0));
    memset(st, 0, sizeof *st);
    enc_ctx c = {0};
    int rc = TRI_EXIT_FAILURE;
    c.tk = cfg->tk;
    c.nt = cfg->n_threads > 0 ? cfg->n_threads : omp_get_max_threads();
    c.eot_before = !strcmp(cfg->format, "llmc");
    /* llm.c's Llama 3 files put <|begin_of_text|> before each document */
    c.eot = c.eot_before && tri_tokenizer_bos(cfg->tk) >= 0 ? tri_tokenizer_bos(cfg->tk) : tri_tokenizer_eot(cfg->tk);
    if (c.eot < 0) tri_note("the tokenizer has no <|endoftext|>; documents are not separated");
    c.n_parts = c.nt * 4 > 256 ? 256 : c.nt * 4;
    c.cache = calloc((size_t)c.nt, sizeof *c.cache);
    c.parts = calloc((size_t)c.n_parts, sizeof *c.parts);
    if (!c.cache || !c.parts) goto done;
    for (int t = 0; t < c.nt; t++)
        if (!(c.cache[t] = tri_tokcache_new())) goto done;
    if (tri_tokwriter_open(&c.w, cfg->out_prefix, cfg->format, tri_tokenizer_vocab_size(cfg->tk))) {
        rc = TRI_EXIT_BAD_INPUT;
        goto done;
    }
    c.prog = (progress){.t0 = tri_now_s(), .total = cfg->total_bytes, .tty = tri_status_tty(), .quiet = cfg->quiet};
    c.prog.last = c.prog.t0;
    rc = encode_all(&c, cfg, files, n_files);
    if (rc != TRI_EXIT_OK) {
        if (c.prog.tty && !cfg->quiet) tri_status_end();
        tri_tokwriter_abort(c.w); /* no partial file in place */
        goto done;
    }
    progress_show(&c.prog, 1);
    st->n_tokens = tri_tokwriter_tokens(c.w);
    st->n_docs = tri_tokwriter_docs(c.w);
    if (tri_tokwriter_close(c.w)) {
        memset(st, 0, sizeof *st);
        rc = TRI_EXIT_FAILURE;
        goto done;
    }
    st->bytes = c.prog.done;
    st->seconds = tri_now_s() - c.prog.t0;
    st->n_threads = c.nt;
done:
    if (c.cache)
        for (int t = 0; t < c.nt; t++) tri_tokcache_free(c.cache[t]);
    free(c.cache);
    if (c.parts)
        for (int p = 0; p < c.n_parts; p++) free(c.parts[p].ids);
    free(c.parts);
    return rc;
}
