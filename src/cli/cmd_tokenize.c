/* `trident tokenize train|encode|decode`: the command-line side of the BPE
 * tokenizer (data/tok/tokenizer.h) and the token-file writer (data/dataset.h).
 *
 * encode: one document per input file, or with --jsonl one document per
 * line (its "text" field). Documents are separated by <|endoftext|>: the
 * llm.c format puts it before every document (as llm.c's own data scripts
 * do), the Megatron format after every document (Megatron's --append-eod).
 * Text is read in blocks cut at safe pre-token boundaries and encoded by all
 * threads at once (each with its own word cache); the output is the same
 * for any thread count. */
#include "cli/cmd_tokenize.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/text.h"
#include "data/tok/tokenizer.h"
#include "base/stop.h"
#include "cli/cli.h"
#include "base/err.h"

static void tok_usage(FILE *f) {
    fprintf(f, "usage: trident tokenize train --vocab-size N --out tok.json [--threads K] CORPUS...\n"
               "       trident tokenize encode (--tokenizer tok.json | --bytes) --format llmc|megatron --out PREFIX\n"
               "                               [--jsonl] [--threads K] [--quiet] INPUT...\n"
               "       trident tokenize decode (--tokenizer tok.json | --bytes) [--format llmc|megatron] INPUT\n"
               "  train         learn a byte-level BPE tokenizer from text files (.xz read through xz -dc);\n"
               "                N counts the 256 bytes and <|endoftext|> (N >= 257); writes a Hugging Face\n"
               "                tokenizer.json\n"
               "  encode        text -> token file: one document per INPUT file, or with --jsonl one per\n"
               "                line (its \"text\" field); <|endoftext|> separates documents\n"
               "                (llmc: PREFIX.bin, EOT before each document; megatron: PREFIX.bin +\n"
               "                PREFIX.idx, EOT after each document)\n"
               "  decode        token file -> text on stdout (--format, if given, must match the file)\n"
               "  --tokenizer   a tokenizer.json, a GPT-2 vocab.json (merges.txt beside it), a directory\n"
               "                holding tokenizer.json or vocab.json + merges.txt, or a prefix P of\n"
               "                Pvocab.json + Pmerges.txt\n"
               "  --bytes       the byte tokenizer instead (id = byte value, vocab 256, no EOT)\n"
               "  --threads K   threads (default: all cores)\n"
               "  --quiet       (encode) no progress lines\n");
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Checks that every input is a readable regular file; adds up the sizes of
 * the uncompressed ones into *total (0 if any is .xz: unknown). */
static int check_inputs(char **files, int n, uint64_t *total) {
    uint64_t t = 0;
    int known = 1;
    for (int i = 0; i < n; i++) {
        struct stat st;
        if (stat(files[i], &st) != 0 || access(files[i], R_OK) != 0) {
            tri_error("%s: cannot read: no such file or no permission", files[i]);
            return -1;
        }
        if (!S_ISREG(st.st_mode)) {
            tri_error("%s: not a regular file", files[i]);
            return -1;
        }
        if (ends_with(files[i], ".xz")) known = 0;
        t += (uint64_t)st.st_size;
    }
    *total = known ? t : 0;
    return 0;
}

static int parse_threads(const char *val, int *out) {
    long v;
    if (tri_arg_int("--threads", val, 1, 4096, &v)) return -1;
    *out = (int)v;
    return 0;
}

/* ---- train ------------------------------------------------------------------- */

static int cmd_train(int argc, char **argv) {
    long vocab = 0;
    const char *out = NULL;
    int threads = 0;
    char **files = calloc((size_t)argc, sizeof *files);
    int n_files = 0, rc = 2;
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tok_usage(stdout);
            rc = 0;
            goto done;
        } else if (!strcmp(a, "--vocab-size")) {
            if (tri_arg_int("--vocab-size", val, 257, 1L << 30, &vocab)) goto done;
            i++;
        } else if (!strcmp(a, "--out")) {
            if (!val) {
                tri_error("--out: expected a file name");
                goto done;
            }
            out = val;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (parse_threads(val, &threads)) goto done;
            i++;
        } else if (a[0] == '-' && a[1]) {
            tri_error("tokenize train: unknown option '%s' (try --help)", a);
            goto done;
        } else {
            files[n_files++] = argv[i];
        }
    }
    if (!vocab || !out || !n_files) {
        tri_error("tokenize train: needs --vocab-size N, --out FILE and at least one CORPUS file");
        goto done;
    }
    uint64_t total;
    if (check_inputs(files, n_files, &total)) goto done;
    double t0 = now_s();
    tri_tokenizer tk;
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    if (tri_tokenizer_train(&tk, (const char *const *)files, n_files, (int)vocab, threads)) {
        if (tri_stop_signal()) rc = 128 + tri_stop_signal(); /* said; nothing was written */
        goto done;
    }
    double dt = now_s() - t0;
    if (tri_tokenizer_save(&tk, out)) {
        tri_tokenizer_free(&tk);
        rc = 1;
        goto done;
    }
    fprintf(stderr, "trident: tokenize train: %d tokens (%d merges) from %d file%s in %.2f s -> %s\n", tk.vocab_size,
            tk.n_merges, n_files, n_files == 1 ? "" : "s", dt, out);
    if (tk.vocab_size < vocab)
        fprintf(stderr, "trident: note: the corpus had no pair left to merge; the vocabulary is %d, not %ld\n",
                tk.vocab_size, vocab);
    tri_tokenizer_free(&tk);
    rc = 0;
done:
    free(files);
    return rc;
}

/* ---- encode ------------------------------------------------------------------- */

typedef struct ivec {
    int32_t *ids;
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
 * second), or prints a plain line every 5 s otherwise. */
static void progress_show(progress *p, int final) {
    if (p->quiet) return;
    double now = now_s();
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
    if (p->tty)
        fprintf(stderr, "\r%s\033[K%s", line, final ? "\n" : "");
    else if (!final)
        fprintf(stderr, "%s\n", line);
}

typedef struct enc_ctx {
    const tri_tokenizer *tk;
    tri_tokcache **cache; /* (nt) one per thread */
    int nt;
    int eot, eot_before; /* eot_before: llm.c (EOT first), else Megatron (EOT last) */
    tri_tokwriter *w;
    progress prog;
    ivec *parts; /* (n_parts) */
    int n_parts;
} enc_ctx;

#define BLOCK_BYTES ((size_t)16 << 20)
#define SMALL_FILE  ((size_t)1 << 20) /* plain files below this are read whole */

/* One document per file. Returns 0, 2 (bad input), 1 (write failure) or
 * 128 + signal (a stop request). */
static int encode_plain(enc_ctx *c, const char *path) {
    tri_textblocks tb;
    if (tri_textblocks_open(&tb, path, BLOCK_BYTES, 0)) return 2;
    ivec doc = {0};
    int rc = 1, r, fail = 0;
    if (c->eot >= 0 && c->eot_before && ivec_push(&doc, c->eot)) goto oom;
    const char *text;
    size_t len;
    while ((r = tri_textblocks_next(&tb, &text, &len)) == 1) {
        if (tri_stop_signal()) {
            rc = 128 + tri_stop_signal();
            goto done;
        }
        int np = len < ((size_t)1 << 20) ? 1 : c->n_parts;
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
            rc = 128 + tri_stop_signal();
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
        rc = 2;
        goto done;
    }
    if (c->eot >= 0 && !c->eot_before && ivec_push(&doc, c->eot)) goto oom;
    if (tri_tokwriter_add_doc(c->w, doc.ids, doc.n)) goto done;
    rc = 0;
    goto done;
oom:
    tri_error("%s: out of memory", path);
done:
    if (tri_textblocks_close(&tb) && rc == 0) rc = 2;
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
 * their <|endoftext|>. Returns 0, 1 (out of memory, write failure) or
 * 128 + signal (a stop request: nothing of the batch is written). */
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
    if (fail) tri_error("tokenize encode: out of memory");
    if (!fail && tri_stop_signal()) fail = 128 + tri_stop_signal();
    for (size_t i = 0; i < b->n && !fail; i++)
        if (tri_tokwriter_add_doc(c->w, b->d[i].ids.ids, b->d[i].ids.n)) fail = 1;
    c->prog.done += b->bytes;
    batch_clear(b);
    progress_show(&c->prog, 0);
    return fail;
}

/* Reads a whole (small) file into a new batch document. Returns 0 or 2. */
static int add_small_file(doc_batch *b, const char *path, size_t size) {
    tri_textfile tf;
    if (tri_textfile_open(&tf, path)) return 2;
    doc *d = batch_add(b);
    char *buf = d ? malloc(size + 1) : NULL;
    size_t got = buf ? tri_textfile_read(&tf, buf, size + 1) : SIZE_MAX;
    int rc = tri_textfile_close(&tf);
    if (!d || !buf) {
        tri_error("%s: out of memory", path);
        free(buf);
        if (d) b->n--;
        return 2;
    }
    d->buf = buf;
    if (got == SIZE_MAX || rc) return 2;
    if (got > size) { /* the file grew while we read it */
        tri_error("%s: the file changed while being read", path);
        return 2;
    }
    d->text = buf;
    d->len = got;
    b->bytes += got;
    return 0;
}

/* One document per line of a JSON Lines file, in batches of one block.
 * Returns 0, 2 (bad input), 1 or 128 + signal (a stop request). */
static int encode_jsonl(enc_ctx *c, const char *path, doc_batch *b) {
    tri_textblocks tb;
    if (tri_textblocks_open(&tb, path, BLOCK_BYTES, 1)) return 2;
    long line_no = 0;
    int rc = 1, r;
    const char *text;
    size_t len;
    while ((r = tri_textblocks_next(&tb, &text, &len)) == 1) {
        if (tri_stop_signal()) {
            rc = 128 + tri_stop_signal();
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
                rc = 2;
                goto done;
            }
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(d->root, "text");
            if (!cJSON_IsString(t)) {
                tri_error("%s: line %ld: no \"text\" string", path, line_no);
                rc = 2;
                goto done;
            }
            d->text = t->valuestring;
            d->len = strlen(t->valuestring);
        }
        b->bytes = len;
        int f = batch_flush(c, b);
        if (f) {
            rc = f;
            goto done;
        }
    }
    rc = r < 0 ? 2 : 0;
done:
    batch_clear(b);
    if (tri_textblocks_close(&tb) && rc == 0) rc = 2;
    return rc;
}

/* Stops a run that failed half-way without putting a partial file in place. */
static void discard_writer(enc_ctx *c) {
    tri_tokwriter_abort(c->w);
    c->w = NULL;
}

/* --tokenizer PATH or --bytes into *tk; returns 0 or 2. */
static int get_tokenizer(tri_tokenizer *tk, const char *path, int bytes, const char *cmd) {
    if (bytes && path) {
        tri_error("tokenize %s: give --tokenizer or --bytes, not both", cmd);
        return 2;
    }
    if (bytes) {
        tri_tokenizer_bytes(tk);
        return 0;
    }
    if (!path) {
        tri_error("tokenize %s: needs --tokenizer FILE (or --bytes)", cmd);
        return 2;
    }
    return tri_tokenizer_load(tk, path) ? 2 : 0;
}

static int check_format(const char *f) {
    if (f && strcmp(f, "llmc") != 0 && strcmp(f, "megatron") != 0) {
        tri_error("--format: expected llmc or megatron, got '%s'", f);
        return -1;
    }
    return 0;
}

static int cmd_encode(int argc, char **argv) {
    const char *tok_path = NULL, *format = NULL, *out = NULL;
    int bytes = 0, jsonl = 0, quiet = 0, threads = 0, n_files = 0, rc = 2;
    char **files = calloc((size_t)argc, sizeof *files);
    tri_tokenizer tk = {0};
    enc_ctx c = {0};
    doc_batch batch = {0};
    if (!files) return 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tok_usage(stdout);
            free(files);
            return 0;
        } else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--format") || !strcmp(a, "--out")) {
            if (!val) {
                tri_error("%s: expected a value", a);
                goto done;
            }
            *(!strcmp(a, "--tokenizer") ? &tok_path : !strcmp(a, "--format") ? &format : &out) = val;
            i++;
        } else if (!strcmp(a, "--threads")) {
            if (parse_threads(val, &threads)) goto done;
            i++;
        } else if (!strcmp(a, "--bytes")) {
            bytes = 1;
        } else if (!strcmp(a, "--jsonl")) {
            jsonl = 1;
        } else if (!strcmp(a, "--quiet")) {
            quiet = 1;
        } else if (a[0] == '-' && a[1]) {
            tri_error("tokenize encode: unknown option '%s' (try --help)", a);
            goto done;
        } else {
            files[n_files++] = argv[i];
        }
    }
    if (!format || !out || !n_files) {
        tri_error("tokenize encode: needs --format llmc|megatron, --out PREFIX and at least one INPUT");
        goto done;
    }
    if (check_format(format)) goto done;
    uint64_t total;
    if (check_inputs(files, n_files, &total)) goto done;
    if (get_tokenizer(&tk, tok_path, bytes, "encode")) goto done;
    c.tk = &tk;
    c.nt = threads > 0 ? threads : omp_get_max_threads();
    c.eot = tri_tokenizer_eot(&tk);
    c.eot_before = !strcmp(format, "llmc");
    if (c.eot < 0) fprintf(stderr, "trident: note: the tokenizer has no <|endoftext|>; documents are not separated\n");
    c.n_parts = c.nt * 4 > 256 ? 256 : c.nt * 4;
    c.cache = calloc((size_t)c.nt, sizeof *c.cache);
    c.parts = calloc((size_t)c.n_parts, sizeof *c.parts);
    if (!c.cache || !c.parts) {
        rc = 1;
        goto done;
    }
    for (int t = 0; t < c.nt; t++)
        if (!(c.cache[t] = tri_tokcache_new())) {
            rc = 1;
            goto done;
        }
    if (tri_tokwriter_open(&c.w, out, format, tri_tokenizer_vocab_size(&tk))) goto done;
    c.prog = (progress){.t0 = now_s(), .total = total, .tty = isatty(STDERR_FILENO), .quiet = quiet};
    c.prog.last = c.prog.t0;
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    rc = 0;
    /* small plain files are read whole and encoded many at a time; big
     * (or compressed) ones block by block, each block split over threads */
    for (int f = 0; f < n_files && !rc; f++) {
        if (tri_stop_signal()) {
            rc = 128 + tri_stop_signal();
            break;
        }
        struct stat st;
        size_t size = stat(files[f], &st) == 0 ? (size_t)st.st_size : SIZE_MAX;
        if (jsonl) {
            rc = encode_jsonl(&c, files[f], &batch);
        } else if (size < SMALL_FILE && !ends_with(files[f], ".xz")) {
            rc = add_small_file(&batch, files[f], size);
            if (!rc && (batch.bytes >= BLOCK_BYTES || batch.n >= 4096)) rc = batch_flush(&c, &batch);
        } else {
            rc = batch.n ? batch_flush(&c, &batch) : 0;
            if (!rc) rc = encode_plain(&c, files[f]);
        }
    }
    if (!rc && batch.n) rc = batch_flush(&c, &batch);
    batch_clear(&batch);
    free(batch.d);
    if (rc) {
        if (c.prog.tty && !quiet) fputc('\n', stderr);
        discard_writer(&c);
        if (rc >= 128)
            tri_error("tokenize encode: %s: stopped; nothing written (%s%s left as it was)", tri_stop_name(rc - 128),
                      out, !strcmp(format, "llmc") ? ".bin" : ".bin/.idx");
        goto done;
    }
    progress_show(&c.prog, 1);
    size_t n_tok = tri_tokwriter_tokens(c.w), n_doc = tri_tokwriter_docs(c.w);
    if (tri_tokwriter_close(c.w)) {
        c.w = NULL;
        rc = 1;
        goto done;
    }
    c.w = NULL;
    double dt = now_s() - c.prog.t0;
    tri_error("tokenize encode: %zu document%s, %zu tokens (%.2f bytes/token) from %.1f MB in %.1f s "
              "(%.1f MB/s, %d thread%s) -> %s%s",
              n_doc, n_doc == 1 ? "" : "s", n_tok, n_tok ? (double)c.prog.done / (double)n_tok : 0.0,
              (double)c.prog.done / 1e6, dt, dt > 0 ? (double)c.prog.done / 1e6 / dt : 0.0, c.nt, c.nt == 1 ? "" : "s",
              out, !strcmp(format, "llmc") ? ".bin" : ".bin + .idx");
    rc = 0;
done:
    if (c.cache)
        for (int t = 0; t < c.nt; t++) tri_tokcache_free(c.cache[t]);
    free(c.cache);
    if (c.parts)
        for (int p = 0; p < c.n_parts; p++) free(c.parts[p].ids);
    free(c.parts);
    tri_tokenizer_free(&tk);
    free(files);
    return rc;
}

/* ---- decode --------------------------------------------------------------------- */

static int cmd_decode(int argc, char **argv) {
    const char *tok_path = NULL, *format = NULL, *input = NULL;
    int bytes = 0, rc = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            tok_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--tokenizer") || !strcmp(a, "--format")) {
            if (!val) {
                tri_error("%s: expected a value", a);
                return 2;
            }
            *(!strcmp(a, "--tokenizer") ? &tok_path : &format) = val;
            i++;
        } else if (!strcmp(a, "--bytes")) {
            bytes = 1;
        } else if (a[0] == '-' && a[1]) {
            tri_error("tokenize decode: unknown option '%s' (try --help)", a);
            return 2;
        } else if (input) {
            tri_error("tokenize decode: one INPUT only (got '%s' and '%s')", input, a);
            return 2;
        } else {
            input = a;
        }
    }
    if (!input) {
        tri_error("tokenize decode: needs an INPUT token file");
        return 2;
    }
    if (check_format(format)) return 2;
    tri_tokenizer tk = {0};
    if (get_tokenizer(&tk, tok_path, bytes, "decode")) return 2;
    tri_dataset ds;
    if (tri_dataset_open(&ds, input, tri_tokenizer_vocab_size(&tk))) {
        tri_tokenizer_free(&tk);
        return 2;
    }
    if (format && strcmp(format, ds.format == TRI_DATA_LLMC ? "llmc" : "megatron") != 0) {
        tri_error("%s: --format %s, but the file is %s", input, format, tri_data_format_name(ds.format));
        goto done;
    }
    const size_t chunk = (size_t)1 << 20;
    int32_t *ids = malloc(chunk * sizeof *ids);
    if (!ids) {
        rc = 1;
        goto done;
    }
    for (size_t s = 0; s < ds.n_tokens; s += chunk) {
        size_t n = ds.n_tokens - s < chunk ? ds.n_tokens - s : chunk;
        if (tri_dataset_read(&ds, s, n, ids) != 0) {
            free(ids);
            rc = 1;
            goto done;
        }
        char *text;
        size_t tl = tri_tokenizer_decode(&tk, ids, n, &text);
        if (tl == SIZE_MAX) {
            free(ids);
            goto done;
        }
        size_t wr = fwrite(text, 1, tl, stdout);
        free(text);
        if (wr != tl) {
            tri_error("tokenize decode: error writing to stdout");
            free(ids);
            rc = 1;
            goto done;
        }
    }
    free(ids);
    rc = fflush(stdout) == 0 ? 0 : 1;
    if (rc) tri_error("tokenize decode: error writing to stdout");
done:
    tri_dataset_close(&ds);
    tri_tokenizer_free(&tk);
    return rc;
}

int tri_cmd_tokenize(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        tok_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *sub = argv[1];
    if (!strcmp(sub, "train")) return cmd_train(argc - 1, argv + 1);
    if (!strcmp(sub, "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(sub, "decode")) return cmd_decode(argc - 1, argv + 1);
    tri_error("tokenize: unknown subcommand '%s' (train, encode or decode)", sub);
    return 2;
}
