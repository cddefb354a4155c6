/* Token files, the sampler and `trident data`.
 *
 * Independent side: every file Trident reads here is written by a small
 * /usr/bin/python3 program (struct only) that follows the published layouts
 * (REFERENCE.md), and every file Trident writes is parsed back by Python.
 * Token values follow closed forms (tok() below, or "token = position") so
 * expected values never come from the code under test. */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/dataset.h"
#include "data/sampler.h"
#include "cli/cmd_data.h"

/* ---- helpers ------------------------------------------------------------ */

/* Token at stream position p for vocabulary v (mirrored in GEN_PY). */
static int32_t tok(size_t p, int32_t v) { return (int32_t)((p * 7919u + 13u) % (size_t)v); }

static const char GEN_PY[] =
    "import struct, os, sys\n"
    "def tok(p, v): return (p * 7919 + 13) % v\n"
    "FMT = {1: 'B', 2: 'b', 3: 'h', 4: 'i', 5: 'q', 6: 'd', 7: 'f', 8: 'H'}\n"
    "SIZE = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 6: 8, 7: 4, 8: 2}\n"
    "def write_llmc(path, tokens, magic=20240520, version=1, count=None, fmt='H', cut=0, extra=b''):\n"
    "    h = [0] * 256\n"
    "    h[0], h[1] = magic, version\n"
    "    h[2] = len(tokens) if count is None else count\n"
    "    data = struct.pack('<256i', *h) + struct.pack('<%d%s' % (len(tokens), fmt), *tokens) + extra\n"
    "    if cut: data = data[:len(data) - cut]\n"
    "    open(path, 'wb').write(data)\n"
    "# docs: list of documents, each a list of sequences (lists of ids)\n"
    "def write_megatron(prefix, docs, code=8, magic=b'MMIDIDX\\x00\\x00', version=1, n=None,\n"
    "                   doc_idx=None, ptrs=None, idx_cut=0, bin_cut=0, bin_extra=b''):\n"
    "    seqs = [s for d in docs for s in d]\n"
    "    lens = [len(s) for s in seqs]\n"
    "    size = SIZE.get(code, 2)\n"
    "    if ptrs is None:\n"
    "        ptrs, p = [], 0\n"
    "        for l in lens: ptrs.append(p); p += l * size\n"
    "    if doc_idx is None:\n"
    "        doc_idx = [0]\n"
    "        for d in docs: doc_idx.append(doc_idx[-1] + len(d))\n"
    "    f = FMT.get(code, 'H')\n"
    "    b = b''.join(struct.pack('<%d%s' % (len(s), f), *s) for s in seqs) + bin_extra\n"
    "    if bin_cut: b = b[:len(b) - bin_cut]\n"
    "    N = len(lens) if n is None else n\n"
    "    x = magic + struct.pack('<Q', version) + struct.pack('<B', code)\n"
    "    x += struct.pack('<Q', N) + struct.pack('<Q', len(doc_idx))\n"
    "    x += struct.pack('<%di' % len(lens), *lens) + struct.pack('<%dq' % len(ptrs), *ptrs)\n"
    "    x += struct.pack('<%dq' % len(doc_idx), *doc_idx)\n"
    "    if idx_cut: x = x[:len(x) - idx_cut]\n"
    "    open(prefix + '.bin', 'wb').write(b)\n"
    "    open(prefix + '.idx', 'wb').write(x)\n"
    "# documents of the given lengths, one sequence each, tokens tok(position, v)\n"
    "def docs_tok(lengths, v, split=()):\n"
    "    docs, p = [], 0\n"
    "    for i, l in enumerate(lengths):\n"
    "        s = [tok(p + j, v) for j in range(l)]\n"
    "        p += l\n"
    "        docs.append([s[:l // 2], s[l // 2:]] if i in split else [s])\n"
    "    return docs\n"
    "def fail(msg): print(msg); sys.exit(0)\n";

typedef struct tdir {
    char dir[64];
} tdir;

static void tdir_make(tdir *t) {
    strcpy(t->dir, "/tmp/tri_data_XXXXXX");
    cr_assert_not_null(mkdtemp(t->dir), "mkdtemp failed");
    char p[128];
    snprintf(p, sizeof p, "%s/gen.py", t->dir);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(GEN_PY, 1, strlen(GEN_PY), f), strlen(GEN_PY));
    cr_assert_eq(fclose(f), 0);
}

static void tdir_rm(tdir *t) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", t->dir);
    cr_assert_eq(system(cmd), 0);
}

/* dir/name into out (static ring of buffers, fine for a few at a time). */
static const char *at(const tdir *t, const char *name) {
    static char ring[8][256];
    static int next = 0;
    char *p = ring[next++ % 8];
    snprintf(p, 256, "%s/%s", t->dir, name);
    return p;
}

/* Runs a Python snippet (after `from gen import *`) in t->dir; its stdout
 * (trimmed) goes to out. Asserts exit status 0. */
static void py(const tdir *t, char *out, size_t cap, const char *fmt, ...) {
    char path[128];
    snprintf(path, sizeof path, "%s/snip.py", t->dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "import sys\nsys.path.insert(0, '%s')\nimport os\nos.chdir('%s')\nfrom gen import *\n", t->dir, t->dir);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    cr_assert_eq(fclose(f), 0);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s'", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char sink[256];
    char *buf = out ? out : sink;
    size_t n = out ? cap : sizeof sink, got = fread(buf, 1, n - 1, p);
    buf[got] = '\0';
    while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' ')) buf[--got] = '\0';
    int st = pclose(p);
    cr_assert_eq(st, 0, "python snippet failed (status %d): %s", st, buf);
}

/* Redirects a file descriptor (1 or 2) into a temporary file. */
typedef struct capture {
    int fd, saved, tmp;
} capture;

static void cap_begin(capture *c, int fd) {
    char name[] = "/tmp/tri_cap_XXXXXX";
    fflush(stdout);
    fflush(stderr);
    c->fd = fd;
    c->tmp = mkstemp(name);
    cr_assert(c->tmp >= 0);
    unlink(name);
    c->saved = dup(fd);
    cr_assert(c->saved >= 0);
    cr_assert(dup2(c->tmp, fd) >= 0);
}

/* Restores the descriptor; the captured text goes to buf. Returns its length. */
static size_t cap_end(capture *c, char *buf, size_t cap) {
    fflush(stdout);
    fflush(stderr);
    cr_assert(dup2(c->saved, c->fd) >= 0);
    close(c->saved);
    off_t size = lseek(c->tmp, 0, SEEK_END);
    cr_assert(lseek(c->tmp, 0, SEEK_SET) == 0);
    size_t want = (size_t)size < cap - 1 ? (size_t)size : cap - 1, got = 0;
    while (got < want) {
        ssize_t r = read(c->tmp, buf + got, want - got);
        cr_assert(r > 0);
        got += (size_t)r;
    }
    buf[got] = '\0';
    close(c->tmp);
    return got;
}

/* tri_dataset_open expected to fail; returns its stderr. */
static void open_fails(const char *path, int vocab, char *msg, size_t cap) {
    capture c;
    tri_dataset ds;
    cap_begin(&c, 2);
    int rc = tri_dataset_open(&ds, path, vocab);
    cap_end(&c, msg, cap);
    if (rc == 0) tri_dataset_close(&ds);
    cr_assert_eq(rc, -1, "open of %s should fail", path);
    cr_assert(ds.bin_map == NULL && ds.n_tokens == 0, "a failed open must leave *ds zeroed");
    cr_assert(strncmp(msg, "trident: ", 9) == 0, "message must start with 'trident: ': %s", msg);
    cr_assert(strchr(msg, '\n') == msg + strlen(msg) - 1, "message must be one line: %s", msg);
}

static void assert_has(const char *msg, const char *needle) {
    cr_assert(strstr(msg, needle) != NULL, "expected \"%s\" in: %s", needle, msg);
}

static void check_stream(const tri_dataset *ds, int32_t v) {
    int32_t *buf = malloc(ds->n_tokens * sizeof *buf + 4);
    cr_assert_not_null(buf);
    tri_dataset_read(ds, 0, ds->n_tokens, buf);
    for (size_t p = 0; p < ds->n_tokens; p++)
        cr_assert_eq(buf[p], tok(p, v), "token %zu: %d != %d", p, buf[p], tok(p, v));
    /* and a read from the middle */
    if (ds->n_tokens > 10) {
        tri_dataset_read(ds, 7, 3, buf);
        for (size_t p = 0; p < 3; p++) cr_assert_eq(buf[p], tok(7 + p, v));
    }
    free(buf);
}

/* ---- llm.c files ------------------------------------------------------- */

Test(data, llmc_file_written_by_python_reads_back) {
    tdir t;
    tdir_make(&t);
    py(&t, NULL, 0, "write_llmc('a.bin', [tok(p, 50257) for p in range(10007)])");
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "a.bin"), 50257), 0);
    cr_assert_eq(ds.format, TRI_DATA_LLMC);
    cr_assert_eq(ds.dtype, TRI_DT_U16);
    cr_assert_eq(ds.token_bytes, 2);
    cr_assert_eq(ds.n_tokens, 10007);
    cr_assert_eq(ds.n_docs, 1);
    check_stream(&ds, 50257);
    size_t s, n;
    cr_assert_eq(tri_dataset_doc(&ds, 0, &s, &n), 0);
    cr_assert(s == 0 && n == 10007);
    cr_assert_eq(tri_dataset_doc(&ds, 1, &s, &n), -1);
    int64_t mn, mx;
    tri_dataset_minmax(&ds, &mn, &mx);
    int64_t emn = INT64_MAX, emx = INT64_MIN;
    for (size_t p = 0; p < 10007; p++) {
        emn = tok(p, 50257) < emn ? tok(p, 50257) : emn;
        emx = tok(p, 50257) > emx ? tok(p, 50257) : emx;
    }
    cr_assert(mn == emn && mx == emx);
    tri_dataset_close(&ds);
    tri_dataset_close(&ds); /* idempotent */
    tri_dataset_close(NULL);
    tdir_rm(&t);
}

Test(data, llmc_uint32_variant_reads_back) {
    tdir t;
    tdir_make(&t);
    py(&t, NULL, 0,
       "write_llmc('l3.bin', [tok(p, 128256) for p in range(3001)], magic=20240801, "
       "version=7, fmt='I')");
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "l3.bin"), 128256), 0);
    cr_assert_eq(ds.dtype, TRI_DT_U32);
    cr_assert_eq(ds.n_tokens, 3001);
    check_stream(&ds, 128256);
    tri_dataset_close(&ds);
    tdir_rm(&t);
}

/* ---- Megatron files ----------------------------------------------------- */

static const size_t DOC_LENS[] = {5, 0, 17, 1000, 1, 333};
#define N_DOCS (sizeof DOC_LENS / sizeof DOC_LENS[0])

static void check_megatron_docs(const tri_dataset *ds, int32_t v) {
    cr_assert_eq(ds->n_docs, N_DOCS);
    size_t start = 0;
    for (size_t d = 0; d < N_DOCS; d++) {
        size_t s, n;
        cr_assert_eq(tri_dataset_doc(ds, d, &s, &n), 0);
        cr_assert(s == start && n == DOC_LENS[d], "doc %zu: [%zu, +%zu) expected [%zu, +%zu)", d, s, n, start,
                  DOC_LENS[d]);
        start += DOC_LENS[d];
    }
    cr_assert_eq(ds->n_tokens, start);
    cr_assert_eq(tri_dataset_doc(ds, N_DOCS, &(size_t){0}, &(size_t){0}), -1);
    check_stream(ds, v);
}

Test(data, megatron_pair_written_by_python_reads_back_from_any_name) {
    tdir t;
    tdir_make(&t);
    /* document 2 and 3 are split into two sequences each (sentence-split style) */
    py(&t, NULL, 0,
       "write_megatron('m_text_document', docs_tok([5, 0, 17, 1000, 1, 333], 50257, "
       "split=(2, 3)), code=8)");
    const char *names[] = {"m_text_document", "m_text_document.bin", "m_text_document.idx"};
    for (int i = 0; i < 3; i++) {
        tri_dataset ds;
        cr_assert_eq(tri_dataset_open(&ds, at(&t, names[i]), 50257), 0, "open %s", names[i]);
        cr_assert_eq(ds.format, TRI_DATA_MEGATRON);
        cr_assert_eq(ds.dtype, TRI_DT_U16);
        cr_assert_eq(ds.n_seqs, N_DOCS + 2);
        check_megatron_docs(&ds, 50257);
        tri_dataset_close(&ds);
    }
    tdir_rm(&t);
}

Test(data, megatron_every_integer_dtype_reads_back) {
    static const struct {
        int code, vocab, bytes;
    } c[] = {{1, 256, 1}, {2, 128, 1}, {3, 30000, 2}, {4, 100000, 4}, {5, 100000, 8}, {8, 65000, 2}};
    tdir t;
    tdir_make(&t);
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        py(&t, NULL, 0, "write_megatron('d%d', docs_tok([5, 0, 17, 1000, 1, 333], %d), code=%d)", c[i].code, c[i].vocab,
           c[i].code);
        char name[16];
        snprintf(name, sizeof name, "d%d", c[i].code);
        tri_dataset ds;
        cr_assert_eq(tri_dataset_open(&ds, at(&t, name), c[i].vocab), 0, "dtype code %d", c[i].code);
        cr_assert_eq(ds.dtype, c[i].code);
        cr_assert_eq(ds.token_bytes, c[i].bytes);
        check_megatron_docs(&ds, c[i].vocab);
        tri_dataset_close(&ds);
    }
    tdir_rm(&t);
}

/* ---- errors ------------------------------------------------------------- */

Test(data, missing_file_is_an_error) {
    char msg[1024];
    open_fails("/nonexistent/tri/none.bin", 0, msg, sizeof msg);
    assert_has(msg, "/nonexistent/tri/none.bin: no such file");
}

Test(data, llmc_header_errors_name_the_file_and_value) {
    tdir t;
    tdir_make(&t);
    char msg[1024];
    py(&t, NULL, 0,
       "write_llmc('magic.bin', [1, 2, 3], magic=12345)\n"
       "write_llmc('version.bin', [1, 2, 3], version=2)\n"
       "write_llmc('trunc.bin', list(range(500)), count=1000)\n"
       "write_llmc('stray.bin', list(range(500)), extra=b'xy')\n"
       "write_llmc('negcount.bin', [], count=-4)\n"
       "open('short.bin', 'wb').write(struct.pack('<3i', 20240520, 1, 0))\n"
       "open('tiny.bin', 'wb').write(b'ab')\n");
    open_fails(at(&t, "magic.bin"), 0, msg, sizeof msg);
    assert_has(msg, "magic.bin: not a token file: bad magic 12345");
    open_fails(at(&t, "version.bin"), 0, msg, sizeof msg);
    assert_has(msg, "version.bin: unsupported version 2 at byte offset 4");
    open_fails(at(&t, "trunc.bin"), 0, msg, sizeof msg);
    assert_has(msg, "trunc.bin: truncated: the header says 1000 tokens");
    assert_has(msg, "holds 2024 bytes"); /* 1024 + 500 * 2 */
    open_fails(at(&t, "stray.bin"), 0, msg, sizeof msg);
    assert_has(msg, "stray.bin: 2 stray bytes");
    open_fails(at(&t, "negcount.bin"), 0, msg, sizeof msg);
    assert_has(msg, "negative token count -4");
    open_fails(at(&t, "short.bin"), 0, msg, sizeof msg);
    assert_has(msg, "short.bin: truncated header: the file holds 12 bytes");
    open_fails(at(&t, "tiny.bin"), 0, msg, sizeof msg);
    assert_has(msg, "tiny.bin: not a token file: 2 bytes");
    tdir_rm(&t);
}

Test(data, megatron_index_errors_name_the_file_and_offset) {
    tdir t;
    tdir_make(&t);
    char msg[1024];
    const char *docs = "docs_tok([5, 0, 17, 1000, 1, 333], 50257)";
    py(&t, NULL, 0,
       "d = %s\n"
       "write_megatron('magic', d, magic=b'MMIDIDY\\x00\\x00')\n"
       "write_megatron('version', d, version=2)\n"
       "write_megatron('f64', d, code=6)\n"
       "write_megatron('code9', d, code=9)\n"
       "write_megatron('idxtrunc', d, idx_cut=9)\n"
       "write_megatron('bigN', d, n=1000000)\n"
       "write_megatron('bintrunc', d, bin_cut=3)\n"
       "write_megatron('binextra', d, bin_extra=b'zz')\n"
       "write_megatron('docend', d, doc_idx=[0, 1, 2, 3, 4, 5])\n"
       "write_megatron('docorder', d, doc_idx=[0, 2, 1, 3, 4, 5, 6])\n"
       "write_megatron('ptrpast', d, ptrs=[0, 10, 10, 44, 2044, 1000000])\n"
       "write_megatron('ptrgap', d, ptrs=[0, 12, 12, 46, 2046, 2048])\n"
       "open('short.idx', 'wb').write(b'MMIDIDX\\x00\\x00' + b'\\x01')\n"
       "open('short.bin', 'wb').write(b'')\n",
       docs);
    open_fails(at(&t, "magic.idx"), 0, msg, sizeof msg); /* names the .idx directly */
    assert_has(msg, "magic.idx: not a token file: bad magic");
    open_fails(at(&t, "magic"), 0, msg, sizeof msg); /* prefix: the index is read */
    assert_has(msg, "magic.idx: bad magic at byte offset 0");
    open_fails(at(&t, "version"), 0, msg, sizeof msg);
    assert_has(msg, "version.idx: unsupported version 2 at byte offset 9");
    open_fails(at(&t, "f64.bin"), 0, msg, sizeof msg);
    assert_has(msg, "f64.idx: unsupported dtype code 6 (float64) at byte offset 17");
    open_fails(at(&t, "code9"), 0, msg, sizeof msg);
    assert_has(msg, "code9.idx: unsupported dtype code 9");
    open_fails(at(&t, "idxtrunc"), 0, msg, sizeof msg);
    assert_has(msg, "idxtrunc.idx: truncated: the header announces 6 sequences and 7 document");
    open_fails(at(&t, "bigN"), 0, msg, sizeof msg);
    assert_has(msg, "bigN.idx: truncated: the header announces 1000000 sequences");
    open_fails(at(&t, "bintrunc"), 0, msg, sizeof msg);
    /* last sequence: 333 tokens at byte 2046, the .bin lost 3 of 2712 bytes */
    assert_has(msg, "bintrunc.idx: sequence 5 (pointer 2046 at byte offset ");
    assert_has(msg, "runs past the end of ");
    assert_has(msg, "(2709 bytes)");
    open_fails(at(&t, "binextra"), 0, msg, sizeof msg);
    assert_has(msg, "binextra.bin: holds 2714 bytes but its index");
    assert_has(msg, "describes 2712");
    open_fails(at(&t, "docend"), 0, msg, sizeof msg);
    /* D = 6 entries: arrays at 34 + 6*4 + 6*8 = 106; the last entry at 106 + 5*8 */
    assert_has(msg, "docend.idx: the last document index is 5 at byte offset 146 but there are 6");
    open_fails(at(&t, "docorder"), 0, msg, sizeof msg);
    assert_has(msg, "docorder.idx: document index 2 is 1 at byte offset 122");
    open_fails(at(&t, "ptrpast"), 0, msg, sizeof msg);
    /* pointers start at 34 + 6*4 = 58; sequence 5's is at 58 + 40 */
    assert_has(msg, "ptrpast.idx: sequence 5 (pointer 1000000 at byte offset 98, 333 tokens) runs "
                    "past the end");
    open_fails(at(&t, "ptrgap"), 0, msg, sizeof msg);
    assert_has(msg, "ptrgap.idx: sequence 1: pointer 12 at byte offset 66 does not follow the "
                    "previous sequence (expected 10)");
    open_fails(at(&t, "short"), 0, msg, sizeof msg);
    assert_has(msg, "short.idx: truncated header: the file holds 10 bytes");
    tdir_rm(&t);
}

Test(data, first_token_outside_vocab_is_reported_with_its_byte_offset) {
    tdir t;
    tdir_make(&t);
    char msg[1024];
    /* 600,000 tokens span several parallel scan chunks; bad ids at 777 and later */
    py(&t, NULL, 0,
       "v = [tok(p, 50257) for p in range(600000)]\n"
       "v[777] = 60000; v[5000] = 60001; v[400000] = 65535\n"
       "write_llmc('bad.bin', v)\n"
       "w = [tok(p, 50257) for p in range(600000)]\n"
       "w[300001] = 50257; w[599999] = 50258\n"
       "write_llmc('late.bin', w)\n"
       "write_megatron('neg', [[[tok(p, 1000) for p in range(100)]], [[7] * 23 + [-5, 9999]]], code=4)\n");
    open_fails(at(&t, "bad.bin"), 50257, msg, sizeof msg);
    assert_has(msg, "bad.bin: token id 60000 at byte offset 2578 (token 777) is outside the "
                    "vocabulary [0, 50257)"); /* 1024 + 777 * 2 */
    open_fails(at(&t, "late.bin"), 50257, msg, sizeof msg);
    assert_has(msg, "token id 50257 at byte offset 601026 (token 300001)"); /* 1024 + 2 * 300001 */
    open_fails(at(&t, "neg"), 1000, msg, sizeof msg);
    assert_has(msg, "neg.bin: token id -5 at byte offset 492 (token 123)"); /* 4 * (100 + 23) */
    /* without a vocabulary nothing is scanned */
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "bad.bin"), 0), 0);
    tri_dataset_close(&ds);
    /* a large enough vocabulary accepts the file */
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "bad.bin"), 65536), 0);
    tri_dataset_close(&ds);
    tdir_rm(&t);
}

Test(data, dtype_too_small_for_the_vocabulary_is_an_error) {
    tdir t;
    tdir_make(&t);
    char msg[1024];
    py(&t, NULL, 0,
       "write_llmc('a.bin', [1, 2, 3])\n"
       "write_megatron('u8', [[[1, 2, 3]]], code=1)");
    open_fails(at(&t, "a.bin"), 70000, msg, sizeof msg);
    assert_has(msg, "a.bin: token dtype uint16 holds ids up to 65535, too small for vocab_size 70000");
    open_fails(at(&t, "u8"), 257, msg, sizeof msg);
    assert_has(msg, "u8.bin: token dtype uint8 holds ids up to 255, too small for vocab_size 257");
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "u8"), 256), 0);
    tri_dataset_close(&ds);
    tdir_rm(&t);
}

/* ---- writer ------------------------------------------------------------- */

/* Writes N_DOCS documents with tokens tok(global position, vocab). */
static void write_docs(const char *prefix, const char *format, int vocab) {
    tri_tokwriter *w = NULL;
    cr_assert_eq(tri_tokwriter_open(&w, prefix, format, vocab), 0);
    size_t pos = 0;
    int32_t buf[1000];
    for (size_t d = 0; d < N_DOCS; d++) {
        for (size_t i = 0; i < DOC_LENS[d]; i++) buf[i] = tok(pos + i, vocab);
        cr_assert_eq(tri_tokwriter_add_doc(w, buf, DOC_LENS[d]), 0);
        pos += DOC_LENS[d];
    }
    cr_assert_eq(tri_tokwriter_docs(w), N_DOCS);
    cr_assert_eq(tri_tokwriter_tokens(w), pos);
    cr_assert_eq(tri_tokwriter_close(w), 0);
}

Test(data, llmc_writer_output_parses_in_python) {
    tdir t;
    tdir_make(&t);
    char out[256];
    write_docs(at(&t, "w"), "llmc", 50257);
    py(&t, out, sizeof out,
       "b = open('w.bin', 'rb').read()\n"
       "h = struct.unpack('<256i', b[:1024])\n"
       "n = 5 + 0 + 17 + 1000 + 1 + 333\n"
       "if h[:3] != (20240520, 1, n) or any(h[3:]): fail('header %%r' %% (h[:4],))\n"
       "if len(b) != 1024 + 2 * n: fail('size %%d' %% len(b))\n"
       "t = struct.unpack('<%%dH' %% n, b[1024:])\n"
       "if list(t) != [tok(p, 50257) for p in range(n)]: fail('tokens')\n"
       "if os.path.exists('w.bin.tmp'): fail('tmp left')\n"
       "print('OK')");
    cr_assert_str_eq(out, "OK");
    write_docs(at(&t, "w32"), "llmc", 100000); /* uint32 variant above 65536 */
    py(&t, out, sizeof out,
       "b = open('w32.bin', 'rb').read()\n"
       "h = struct.unpack('<3i', b[:12])\n"
       "n = 1356\n"
       "if h != (20240801, 7, n): fail('header %%r' %% (h,))\n"
       "t = struct.unpack('<%%dI' %% n, b[1024:])\n"
       "if list(t) != [tok(p, 100000) for p in range(n)]: fail('tokens')\n"
       "print('OK')");
    cr_assert_str_eq(out, "OK");
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "w.bin"), 50257), 0);
    check_stream(&ds, 50257);
    tri_dataset_close(&ds);
    tdir_rm(&t);
}

static const char CHECK_MEGATRON_PY[] =
    "def check(prefix, code, size, v):\n"
    "    lens = [5, 0, 17, 1000, 1, 333]\n"
    "    x = open(prefix + '.idx', 'rb').read()\n"
    "    b = open(prefix + '.bin', 'rb').read()\n"
    "    if x[:9] != b'MMIDIDX\\x00\\x00': fail('magic')\n"
    "    ver, = struct.unpack('<Q', x[9:17])\n"
    "    if ver != 1: fail('version %d' % ver)\n"
    "    if x[17] != code: fail('dtype code %d' % x[17])\n"
    "    N, D = struct.unpack('<QQ', x[18:34])\n"
    "    if (N, D) != (6, 7): fail('counts %d %d' % (N, D))\n"
    "    if len(x) != 34 + 4 * N + 8 * N + 8 * D: fail('idx size %d' % len(x))\n"
    "    L = list(struct.unpack('<%di' % N, x[34:34 + 4 * N]))\n"
    "    P = list(struct.unpack('<%dq' % N, x[34 + 4 * N:34 + 12 * N]))\n"
    "    I = list(struct.unpack('<%dq' % D, x[34 + 12 * N:]))\n"
    "    if L != lens: fail('lengths %r' % L)\n"
    "    if P != [size * sum(lens[:i]) for i in range(N)]: fail('pointers %r' % P)\n"
    "    if I != list(range(N + 1)): fail('doc_idx %r' % I)\n"
    "    if len(b) != size * sum(lens): fail('bin size %d' % len(b))\n"
    "    f = {2: 'H', 4: 'i'}[size]\n"
    "    if list(struct.unpack('<%d%s' % (sum(lens), f), b)) != [tok(p, v) for p in range(sum(lens))]:\n"
    "        fail('tokens')\n"
    "    for e in ('.bin.tmp', '.idx.tmp'):\n"
    "        if os.path.exists(prefix + e): fail('tmp left')\n";

Test(data, megatron_writer_output_parses_in_python) {
    tdir t;
    tdir_make(&t);
    char out[256];
    write_docs(at(&t, "m16"), "megatron", 50257);
    write_docs(at(&t, "m32"), "megatron", 100000);
    py(&t, out, sizeof out, "%s\ncheck('m16', 8, 2, 50257)\ncheck('m32', 4, 4, 100000)\nprint('OK')",
       CHECK_MEGATRON_PY);
    cr_assert_str_eq(out, "OK");
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "m32"), 100000), 0);
    cr_assert_eq(ds.dtype, TRI_DT_I32);
    check_megatron_docs(&ds, 100000);
    tri_dataset_close(&ds);
    tdir_rm(&t);
}

Test(data, writer_renames_at_close_and_leaves_nothing_on_failure) {
    tdir t;
    tdir_make(&t);
    struct stat st;
    tri_tokwriter *w = NULL;
    int32_t good[3] = {1, 2, 3}, bad[2] = {4, 50257};
    /* nothing final before close */
    cr_assert_eq(tri_tokwriter_open(&w, at(&t, "x"), "megatron", 50257), 0);
    cr_assert_eq(tri_tokwriter_add_doc(w, good, 3), 0);
    cr_assert(stat(at(&t, "x.bin"), &st) != 0 && stat(at(&t, "x.idx"), &st) != 0);
    cr_assert_eq(tri_tokwriter_close(w), 0);
    cr_assert(stat(at(&t, "x.bin"), &st) == 0 && stat(at(&t, "x.idx"), &st) == 0);
    /* a bad token poisons the writer: no output, and the previous pair survives */
    capture c;
    char msg[512];
    cr_assert_eq(tri_tokwriter_open(&w, at(&t, "x"), "megatron", 50257), 0);
    cr_assert_eq(tri_tokwriter_add_doc(w, good, 3), 0);
    cap_begin(&c, 2);
    int rc = tri_tokwriter_add_doc(w, bad, 2);
    cap_end(&c, msg, sizeof msg);
    cr_assert_eq(rc, -1);
    assert_has(msg, "x.bin: document 1, token 1: id 50257 is outside [0, 50257)");
    cr_assert_eq(tri_tokwriter_add_doc(w, good, 3), -1);
    cr_assert_eq(tri_tokwriter_close(w), -1);
    cr_assert(stat(at(&t, "x.bin.tmp"), &st) != 0 && stat(at(&t, "x.idx.tmp"), &st) != 0);
    tri_dataset ds;
    cr_assert_eq(tri_dataset_open(&ds, at(&t, "x"), 50257), 0);
    cr_assert_eq(ds.n_tokens, 3); /* the first, good pair */
    tri_dataset_close(&ds);
    /* llm.c: uint16 range without a vocabulary; unknown format; close(NULL) */
    cr_assert_eq(tri_tokwriter_open(&w, at(&t, "y"), "llmc", 0), 0);
    int32_t big = 65536;
    cap_begin(&c, 2);
    rc = tri_tokwriter_add_doc(w, &big, 1);
    cap_end(&c, msg, sizeof msg);
    cr_assert_eq(rc, -1);
    cr_assert_eq(tri_tokwriter_close(w), -1);
    cr_assert(stat(at(&t, "y.bin"), &st) != 0 && stat(at(&t, "y.bin.tmp"), &st) != 0);
    cap_begin(&c, 2);
    rc = tri_tokwriter_open(&w, at(&t, "z"), "numpy", 10);
    cap_end(&c, msg, sizeof msg);
    cr_assert(rc == -1 && w == NULL);
    assert_has(msg, "unknown token-file format \"numpy\"");
    cr_assert_eq(tri_tokwriter_close(NULL), 0);
    tdir_rm(&t);
}

/* ---- sampler ------------------------------------------------------------ */

/* Sampler files: llm.c uint32 files whose token at position p is base + p,
 * with dataset i of a blend at base i * SPAN. */
#define SPAN      100000
#define VOCAB_POS (1 << 20)

static void write_positions(tdir *t, const char *name, size_t n, int base) {
    py(t, NULL, 0, "write_llmc('%s', [%d + p for p in range(%zu)], magic=20240801, version=7, fmt='I')", name, base, n);
}

/* Checks a filled batch is made of windows (tokens = positions): every row's
 * inputs are consecutive from a multiple of T (after subtracting the
 * dataset's base) and targets are inputs shifted by one. Returns the window
 * starts in starts[rows] (position, with base). */
static void check_rows(const int32_t *in, const int32_t *tg, size_t rows, int T, int32_t *starts) {
    for (size_t r = 0; r < rows; r++) {
        const int32_t *x = in + r * (size_t)T, *y = tg + r * (size_t)T;
        int32_t base = x[0] / SPAN * SPAN;
        cr_assert_eq((x[0] - base) % T, 0, "row %zu starts at %d, not a multiple of %d", r, x[0], T);
        for (int i = 0; i < T; i++) {
            cr_assert_eq(x[i], x[0] + i);
            cr_assert_eq(y[i], x[0] + i + 1);
        }
        starts[r] = x[0];
    }
}

Test(data, sampler_is_deterministic_and_seeded) {
    tdir t;
    tdir_make(&t);
    write_positions(&t, "a.bin", 16 * 500 + 3, 0);
    enum { T = 16, G = 10 };
    tri_sampler s1, s2, s3;
    cr_assert_eq(tri_sampler_init(&s1, at(&t, "a.bin"), T, VOCAB_POS, 1234), 0);
    cr_assert_eq(tri_sampler_init(&s2, at(&t, "a.bin"), T, VOCAB_POS, 1234), 0);
    cr_assert_eq(tri_sampler_init(&s3, at(&t, "a.bin"), T, VOCAB_POS, 1235), 0);
    int32_t a[G * T], b[G * T], c[G * T], ta[G * T], tb[G * T], tc[G * T], st[G];
    int differs = 0;
    for (uint64_t step = 0; step < 20; step++) {
        tri_sampler_fill(&s1, step, G, 0, G, a, ta);
        tri_sampler_fill(&s2, step, G, 0, G, b, tb);
        tri_sampler_fill(&s3, step, G, 0, G, c, tc);
        check_rows(a, ta, G, T, st);
        cr_assert(memcmp(a, b, sizeof a) == 0 && memcmp(ta, tb, sizeof ta) == 0);
        differs |= memcmp(a, c, sizeof a) != 0;
    }
    cr_assert(differs, "another seed must give another order");
    tri_sampler_free(&s1);
    tri_sampler_free(&s2);
    tri_sampler_free(&s3);
    tri_sampler_free(NULL);
    tdir_rm(&t);
}

Test(data, sampler_pieces_equal_rows_of_the_full_batch) {
    tdir t;
    tdir_make(&t);
    write_positions(&t, "a.bin", 8 * 300 + 1, 0);
    write_positions(&t, "b.bin", 8 * 170 + 5, SPAN);
    enum { T = 8, G = 24 };
    tri_sampler s;
    char spec[600];
    snprintf(spec, sizeof spec, "0.6:%s, 0.4:%s", at(&t, "a.bin"), at(&t, "b.bin"));
    cr_assert_eq(tri_sampler_init(&s, spec, T, VOCAB_POS, 7), 0);
    int32_t full_in[G * T], full_tg[G * T], in[G * T], tg[G * T], st[G];
    /* layouts: dp=3 x micro 8; dp=2 x micro 4 (3 each); uneven [0,5) [5,24) */
    static const size_t cuts[][8] = {{0, 8, 16, 24}, {0, 4, 8, 12, 16, 20, 24}, {0, 5, 24}};
    static const int n_cuts[] = {4, 7, 3};
    for (uint64_t step = 0; step < 6; step++) {
        tri_sampler_fill(&s, step, G, 0, G, full_in, full_tg);
        check_rows(full_in, full_tg, G, T, st);
        for (int l = 0; l < 3; l++) {
            for (int k = 0; k + 1 < n_cuts[l]; k++) {
                size_t f = cuts[l][k], n = cuts[l][k + 1] - f;
                tri_sampler_fill(&s, step, G, f, n, in + f * T, tg + f * T);
            }
            cr_assert(memcmp(in, full_in, sizeof in) == 0, "layout %d step %llu", l, (unsigned long long)step);
            cr_assert(memcmp(tg, full_tg, sizeof tg) == 0);
        }
    }
    tri_sampler_free(&s);
    tdir_rm(&t);
}

/* Samples [k0, k0 + n) of a G=1 stream: window start positions. */
static void windows_of(const tri_sampler *s, uint64_t k0, size_t n, int T, int32_t *starts) {
    int32_t *in = malloc(n * (size_t)T * sizeof *in), *tg = malloc(n * (size_t)T * sizeof *tg);
    cr_assert(in && tg);
    /* steps of one sequence each: sample k is step k */
    for (size_t i = 0; i < n; i++) tri_sampler_fill(s, k0 + i, 1, 0, 1, in + i * (size_t)T, tg + i * (size_t)T);
    check_rows(in, tg, n, T, starts);
    free(in);
    free(tg);
}

Test(data, sampler_each_epoch_is_a_permutation_of_all_windows) {
    tdir t;
    tdir_make(&t);
    enum { T = 16, W = 1000 };
    write_positions(&t, "a.bin", T * W + 5, 0); /* 5 spare tokens: still W windows */
    tri_sampler s;
    cr_assert_eq(tri_sampler_init(&s, at(&t, "a.bin"), T, VOCAB_POS, 99), 0);
    cr_assert_eq(s.total_windows, W);
    int32_t e0[W], e1[W];
    windows_of(&s, 0, W, T, e0);
    windows_of(&s, W, W, T, e1);
    int seen0[W] = {0}, seen1[W] = {0}, same = 0, in_order = 0;
    for (int i = 0; i < W; i++) {
        cr_assert(e0[i] / T < W && e1[i] / T < W, "window past the last full one");
        seen0[e0[i] / T]++;
        seen1[e1[i] / T]++;
        same += e0[i] == e1[i];
        in_order += e0[i] == i * T;
    }
    for (int w = 0; w < W; w++)
        cr_assert(seen0[w] == 1 && seen1[w] == 1, "window %d seen %d and %d times", w, seen0[w], seen1[w]);
    cr_assert(same < W / 10, "epochs 0 and 1 share %d positions", same);
    cr_assert(in_order < W / 10, "epoch 0 is barely shuffled (%d fixed points)", in_order);
    /* the same through a batch of 7 per step: sample k = step * 7 + j */
    int32_t in[7 * T], tg[7 * T], st[7];
    tri_sampler_fill(&s, 3, 7, 0, 7, in, tg);
    check_rows(in, tg, 7, T, st);
    for (int j = 0; j < 7; j++) cr_assert_eq(st[j], e0[21 + j]);
    tri_sampler_free(&s);
    tdir_rm(&t);
}

/* Blend of datasets at bases 0, SPAN, 2 SPAN, ...: checks that after every
 * prefix K the count of dataset i is within 1 of K * w_i, and that each
 * dataset's own samples run through its windows epoch by epoch. */
static void check_blend(tri_sampler *s, int n_ds, const double *w, const int *windows, int T, size_t K) {
    int32_t *st = malloc(K * sizeof *st);
    cr_assert_not_null(st);
    size_t step = 5000;
    int32_t *in = malloc(step * (size_t)T * sizeof *in), *tg = malloc(step * (size_t)T * sizeof *tg);
    cr_assert(in && tg);
    for (size_t k = 0; k < K; k += step) { /* global batch of 5000 sequences */
        tri_sampler_fill(s, k / step, step, 0, step, in, tg);
        check_rows(in, tg, step, T, st + k);
    }
    size_t count[8] = {0};
    int *seen[8];
    for (int i = 0; i < n_ds; i++) seen[i] = calloc((size_t)windows[i], sizeof(int));
    double worst = 0.0;
    for (size_t k = 0; k < K; k++) {
        int d = st[k] / SPAN;
        cr_assert(d < n_ds);
        int win = (st[k] - d * SPAN) / T;
        cr_assert(win < windows[d]);
        /* epoch of this sample within dataset d: count[d] / windows[d] */
        int epoch = (int)(count[d] / (size_t)windows[d]);
        cr_assert_eq(seen[d][win], epoch, "dataset %d window %d repeated within an epoch", d, win);
        seen[d][win]++;
        count[d]++;
        for (int i = 0; i < n_ds; i++) {
            double dev = fabs((double)count[i] - (double)(k + 1) * w[i]);
            worst = dev > worst ? dev : worst;
            cr_assert(dev < 1.0, "after %zu samples dataset %d has %zu, share %.3f", k + 1, i, count[i],
                      (double)(k + 1) * w[i]);
        }
    }
    for (int i = 0; i < n_ds; i++) free(seen[i]);
    free(st);
    free(in);
    free(tg);
}

Test(data, sampler_blend_counts_follow_weights_within_one, .timeout = 60) {
    tdir t;
    tdir_make(&t);
    enum { T = 4 };
    static const int windows[] = {1000, 700, 1500, 37, 400, 2000};
    char spec[2000];
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%d.bin", i);
        write_positions(&t, name, (size_t)T * windows[i] + 1, SPAN * i);
    }
    tri_sampler s;
    /* three weighted datasets */
    snprintf(spec, sizeof spec, "0.5:%s,0.3:%s,0.2:%s", at(&t, "d0.bin"), at(&t, "d1.bin"), at(&t, "d2.bin"));
    cr_assert_eq(tri_sampler_init(&s, spec, T, VOCAB_POS, 5), 0);
    check_blend(&s, 3, (const double[]){0.5, 0.3, 0.2}, windows, T, 20000);
    tri_sampler_free(&s);
    /* six datasets with weights 1:2:3:5:7:11 (one with only 37 windows: many epochs) */
    int len = 0;
    static const int wt[] = {1, 2, 3, 5, 7, 11};
    for (int i = 0; i < 6; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%d.bin", i);
        len += snprintf(spec + len, sizeof spec - (size_t)len, "%s%d:%s", i ? "," : "", wt[i], at(&t, name));
    }
    cr_assert_eq(tri_sampler_init(&s, spec, T, VOCAB_POS, 6), 0);
    double w6[6];
    for (int i = 0; i < 6; i++) w6[i] = wt[i] / 29.0;
    check_blend(&s, 6, w6, windows, T, 20000);
    tri_sampler_free(&s);
    /* unweighted: shares follow the window counts 1000 : 700 */
    snprintf(spec, sizeof spec, "%s,%s", at(&t, "d0.bin"), at(&t, "d1.bin"));
    cr_assert_eq(tri_sampler_init(&s, spec, T, VOCAB_POS, 7), 0);
    check_blend(&s, 2, (const double[]){1000.0 / 1700.0, 700.0 / 1700.0}, windows, T, 10000);
    tri_sampler_free(&s);
    tdir_rm(&t);
}

Test(data, sampler_eval_windows_are_sequential_and_wrap) {
    tdir t;
    tdir_make(&t);
    enum { T = 16, B = 7 };
    write_positions(&t, "a.bin", T * 1000 + 1, 0);
    write_positions(&t, "b.bin", T * 10 + 1, SPAN);
    tri_sampler s;
    cr_assert_eq(tri_sampler_init(&s, at(&t, "a.bin"), T, VOCAB_POS, 1), 0);
    int32_t in[B * T], tg[B * T], st[B];
    tri_sampler_fill_eval(&s, 3, B, in, tg);
    check_rows(in, tg, B, T, st);
    for (int r = 0; r < B; r++) cr_assert_eq(st[r], (21 + r) * T);
    tri_sampler_fill_eval(&s, 142, B, in, tg); /* windows 994 .. 999, then 0 */
    check_rows(in, tg, B, T, st);
    for (int r = 0; r < B; r++) cr_assert_eq(st[r], ((994 + r) % 1000) * T);
    cr_assert_eq(tri_sampler_eval_batches(&s, B), 143);
    tri_sampler_free(&s);
    /* a blend lists its datasets' windows one after the other */
    char spec[600];
    snprintf(spec, sizeof spec, "0.5:%s,0.5:%s", at(&t, "a.bin"), at(&t, "b.bin"));
    cr_assert_eq(tri_sampler_init(&s, spec, T, VOCAB_POS, 1), 0);
    tri_sampler_fill_eval(&s, 143, B, in, tg); /* 1001 .. 1007: b's windows 1 .. 7 */
    check_rows(in, tg, B, T, st);
    for (int r = 0; r < B; r++) cr_assert_eq(st[r], SPAN + (1 + r) * T);
    tri_sampler_free(&s);
    tdir_rm(&t);
}

Test(data, sampler_split_takes_val_from_the_tail) {
    tdir t;
    tdir_make(&t);
    enum { T = 16, W = 1000 };
    write_positions(&t, "a.bin", T * W + 1, 0);
    tri_sampler tr, va;
    cr_assert_eq(tri_sampler_init_split(&tr, at(&t, "a.bin"), T, VOCAB_POS, 3, 0.1, TRI_SPLIT_TRAIN), 0);
    cr_assert_eq(tri_sampler_init_split(&va, at(&t, "a.bin"), T, VOCAB_POS, 3, 0.1, TRI_SPLIT_VAL), 0);
    cr_assert_eq(tr.total_windows, 900);
    cr_assert_eq(va.total_windows, 100);
    int32_t e[900];
    windows_of(&tr, 0, 900, T, e);
    int seen[900] = {0};
    for (int i = 0; i < 900; i++) {
        cr_assert(e[i] / T < 900, "training sample from the val part");
        seen[e[i] / T]++;
    }
    for (int i = 0; i < 900; i++) cr_assert_eq(seen[i], 1);
    int32_t in[100 * T], tg[100 * T], st[100];
    tri_sampler_fill_eval(&va, 0, 100, in, tg);
    check_rows(in, tg, 100, T, st);
    for (int r = 0; r < 100; r++) cr_assert_eq(st[r], (900 + r) * T);
    tri_sampler_free(&tr);
    tri_sampler_free(&va);
    tdir_rm(&t);
}

static void sampler_fails(const char *spec, int T, double split, int part, const char *needle) {
    tri_sampler s;
    capture c;
    char msg[1024];
    cap_begin(&c, 2);
    int rc = tri_sampler_init_split(&s, spec, T, VOCAB_POS, 1, split, part);
    cap_end(&c, msg, sizeof msg);
    if (rc == 0) tri_sampler_free(&s);
    cr_assert_eq(rc, -1, "spec %s should fail", spec);
    cr_assert(s.src == NULL && s.n_sources == 0, "a failed init must leave *s zeroed");
    cr_assert(strncmp(msg, "trident: ", 9) == 0 && strchr(msg, '\n') == msg + strlen(msg) - 1,
              "one line starting 'trident: ': %s", msg);
    assert_has(msg, needle);
}

Test(data, sampler_rejects_bad_specs) {
    tdir t;
    tdir_make(&t);
    write_positions(&t, "a.bin", 101, 0);
    char spec[600];
    const char *a = at(&t, "a.bin");
    snprintf(spec, sizeof spec, "0.7:%s,%s", a, a);
    sampler_fails(spec, 4, 0, 0, "entry 2");
    snprintf(spec, sizeof spec, "-1:%s", a);
    sampler_fails(spec, 4, 0, 0, "weight -1 must be a finite number > 0");
    snprintf(spec, sizeof spec, "%s,,%s", a, a);
    sampler_fails(spec, 4, 0, 0, "entry 2 is empty");
    sampler_fails(a, 101, 0, 0, "a.bin: 101 tokens hold no window of seq_len + 1 = 102 tokens");
    sampler_fails(a, 100, 0.5, TRI_SPLIT_TRAIN, "cannot be split"); /* 1 window */
    sampler_fails(a, 4, 0, TRI_SPLIT_VAL, "needs a split fraction");
    snprintf(spec, sizeof spec, "0.5:%s,0.5:%s", a, at(&t, "missing.bin"));
    sampler_fails(spec, 4, 0, 0, "missing.bin: no such file");
    /* 100 windows of 1+1 fit */
    tri_sampler s;
    cr_assert_eq(tri_sampler_init(&s, a, 1, VOCAB_POS, 0), 0);
    cr_assert_eq(s.total_windows, 100);
    tri_sampler_free(&s);
    tdir_rm(&t);
}

/* ---- trident data -------------------------------------------------------- */

static int run_cmd(char *out, size_t cap, char *err, size_t ecap, int argc, char **argv) {
    capture co, ce;
    cap_begin(&co, 1);
    cap_begin(&ce, 2);
    int rc = tri_cmd_data(argc, argv);
    cap_end(&ce, err, ecap);
    cap_end(&co, out, cap);
    return rc;
}

Test(data, cli_info_and_dump) {
    tdir t;
    tdir_make(&t);
    py(&t, NULL, 0, "write_megatron('m', docs_tok([5, 0, 17, 1000, 1, 333], 50257), code=8)");
    char out[16384], err[1024];
    char *info[] = {"data", "info", (char *)at(&t, "m"), "--json", "--vocab", "50257", NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 6, info), 0, "%s", err);
    /* parse the JSON independently */
    char chk[256], esc[20000];
    size_t j = 0;
    for (const char *p = out; *p && j + 2 < sizeof esc; p++) {
        if (*p == '\'' || *p == '\\') esc[j++] = '\\';
        esc[j++] = *p == '\n' ? ' ' : *p;
    }
    esc[j] = '\0';
    py(&t, chk, sizeof chk,
       "import json\n"
       "d = json.loads('%s')\n"
       "want = dict(format='megatron', dtype='uint16', token_bytes=2, documents=6, sequences=6,\n"
       "            tokens=1356, min_token=min(tok(p, 50257) for p in range(1356)),\n"
       "            max_token=max(tok(p, 50257) for p in range(1356)))\n"
       "bad = [k for k in want if d.get(k) != want[k]]\n"
       "print('OK' if not bad else 'bad %%r' %% bad)",
       esc);
    cr_assert_str_eq(chk, "OK");
    /* dump document 2 (17 tokens from position 5) */
    char *dump[] = {"data", "dump", (char *)at(&t, "m.idx"), "--doc", "2", NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 5, dump), 0, "%s", err);
    char want[512];
    int n = 0;
    for (int i = 0; i < 17; i++)
        n += snprintf(want + n, sizeof want - (size_t)n, i ? " %d" : "%d", tok(5 + (size_t)i, 50257));
    snprintf(want + n, sizeof want - (size_t)n, "\n");
    cr_assert_str_eq(out, want);
    /* errors: exit code 2 and one line */
    char *range[] = {"data", "dump", (char *)at(&t, "m"), "--doc", "6", NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 5, range), 2);
    assert_has(err, "document 6 out of range (the file has 6 documents)");
    char *nodoc[] = {"data", "dump", (char *)at(&t, "m"), NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 3, nodoc), 2);
    assert_has(err, "--doc N is required");
    char *vocab[] = {"data", "info", (char *)at(&t, "m"), "--vocab", "100", NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 5, vocab), 2);
    assert_has(err, "is outside the vocabulary [0, 100)");
    char *sub[] = {"data", "frobnicate", NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 2, sub), 2);
    char *text[] = {"data", "info", (char *)at(&t, "m.bin"), "--seq-len", "100", NULL};
    cr_assert_eq(run_cmd(out, sizeof out, err, sizeof err, 5, text), 0);
    assert_has(out, "format:     megatron");
    assert_has(out, "documents:  6");
    assert_has(out, "tokens:     1356");
    assert_has(out, "windows:    13 of 100 + 1 tokens"); /* (1356 - 1) / 100 */
    tdir_rm(&t);
}

/* ---- the bundled corpus -------------------------------------------------- */

Test(data, prepare_data_script_writes_the_kjv_split, .timeout = 120) {
    tdir t;
    tdir_make(&t);
    char cmd[512], out[256];
    snprintf(cmd, sizeof cmd, "'%s/scripts/prepare_data.sh' '%s/kjv' >/dev/null", TRI_SOURCE_DIR, t.dir);
    cr_assert_eq(system(cmd), 0);
    py(&t, out, sizeof out,
       "import lzma\n"
       "text = lzma.open('%s/data/corpus/kjv.txt.xz').read()\n"
       "print(len(text), text.count(b'\\n'), sum(text) %% 1000003)",
       TRI_SOURCE_DIR);
    size_t total = 0, lines = 0, sum = 0;
    cr_assert_eq(sscanf(out, "%zu %zu %zu", &total, &lines, &sum), 3);
    tri_dataset tr, va;
    cr_assert_eq(tri_dataset_open(&tr, at(&t, "kjv/train.bin"), 256), 0);
    cr_assert_eq(tri_dataset_open(&va, at(&t, "kjv/val.bin"), 256), 0);
    cr_assert_eq(tr.n_tokens + va.n_tokens, total);
    double frac = (double)va.n_tokens / (double)total;
    cr_assert(frac > 0.04 && frac < 0.06, "val fraction %f", frac);
    int32_t *all = malloc(total * sizeof *all);
    cr_assert_not_null(all);
    tri_dataset_read(&tr, 0, tr.n_tokens, all);
    tri_dataset_read(&va, 0, va.n_tokens, all + tr.n_tokens);
    cr_assert_eq(all[tr.n_tokens - 1], '\n', "the split must fall at a line boundary");
    size_t nl = 0, s = 0;
    for (size_t i = 0; i < total; i++) {
        nl += all[i] == '\n';
        s = (s + (size_t)all[i]) % 1000003;
    }
    cr_assert(nl == lines && s == sum, "token stream differs from the corpus text");
    free(all);
    tri_dataset_close(&tr);
    tri_dataset_close(&va);
    /* idempotent: a second run leaves the files alone */
    struct stat before, after;
    cr_assert_eq(stat(at(&t, "kjv/train.bin"), &before), 0);
    cr_assert_eq(system(cmd), 0);
    cr_assert_eq(stat(at(&t, "kjv/train.bin"), &after), 0);
    cr_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec && before.st_mtim.tv_nsec == after.st_mtim.tv_nsec &&
              before.st_ino == after.st_ino);
    tdir_rm(&t);
}
