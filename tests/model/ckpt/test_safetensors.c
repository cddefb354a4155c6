/* model/safetensors: files written in pieces by several processes and
 * read back by an independent reader (/usr/bin/python3 + numpy parsing the
 * bytes itself), files written by python read by tri_st_open, and every
 * validation error naming the file and the tensor.
 *
 * Values come from one closed form of (tensor index, global row, global
 * column) of the stored 2-D view; python recomputes it on its own side. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/testutil.h"
#include "model/ckpt/safetensors.h"

/* Exact in F32: an integer in (-2^21, 2^21) plus 0.5. */
static float cf(int e, size_t r, size_t c) {
    uint64_t h = ((uint64_t)e * 1000003u + (uint64_t)r * 4099u + (uint64_t)c) % 4194301u;
    return (float)((double)((int64_t)h - 2097150) + 0.5);
}

static int rm_cb(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    return (type == FTW_DP ? rmdir(p) : unlink(p)) == 0 ? 0 : -1;
}

static void make_dir(char *dir, size_t n) {
    snprintf(dir, n, "/tmp/tri_st_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void remove_dir(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
}

static int run_python(const char *script, const char *arg) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 '%s' '%s'", script, arg);
    int st = system(cmd);
    return (st != -1 && WIFEXITED(st)) ? WEXITSTATUS(st) : -1;
}

/* ----------------------------------------------------- stderr capture */

/* stderr of the code under test, captured into a file beside the test's files */
typedef tt_capture capture;

static void cap_begin(capture *c, const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/stderr.txt", dir);
    tt_capture_begin(c, path);
}

#define cap_end tt_capture_end

/* One line "trident: ..." naming every string in `must` (NULL-terminated). */
static void check_message(const char *msg, const char *const *must) {
    cr_assert(strncmp(msg, "trident: ", 9) == 0, "message does not start with trident: [%s]", msg);
    const char *nl = strchr(msg, '\n');
    cr_assert(nl && nl[1] == '\0', "message is not exactly one line: [%s]", msg);
    for (; *must; must++) cr_assert_not_null(strstr(msg, *must), "message [%s] does not name \"%s\"", msg, *must);
}

/* ------------------------------------------ the multi-rank written file */

enum { C = 12, V = 50, T = 20, BIG_R = 3000, BIG_C = 1000, BIG2_R = 1100, BIG2_C = 1000, LONG_N = 1200000, NRANKS = 3 };

/* The names and shapes the python reader expects, in the same order. */
static const char *const NAMES[] = {"transformer.wte.weight",
                                    "transformer.wpe.weight",
                                    "transformer.h.0.attn.c_attn.weight",
                                    "transformer.h.0.attn.c_attn.bias",
                                    "transformer.h.0.attn.c_proj.weight",
                                    "transformer.h.0.ln_1.weight",
                                    "big.weight",
                                    "big2.weight",
                                    "long.bias"};

static void build_layout(tri_st_layout *L) {
    const size_t shapes[][2] = {{V, C}, {T, C},         {C, 3 * C},       {3 * C, 0}, {C, C},
                                {C, 0}, {BIG_R, BIG_C}, {BIG2_R, BIG2_C}, {LONG_N, 0}};
    const int ndims[] = {2, 2, 2, 1, 2, 1, 2, 2, 1};
    tri_st_layout_init(L);
    for (int e = 0; e < 9; e++) cr_assert_eq(tri_st_layout_add(L, NAMES[e], ndims[e], shapes[e]), e);
}

static float *alloc_nan(size_t n) {
    float *b = malloc(n * sizeof *b);
    cr_assert_not_null(b);
    for (size_t i = 0; i < n; i++) b[i] = NAN; /* padding that must never reach the file */
    return b;
}

static int put(int fd, const tri_st_layout *L, int e, size_t r0, size_t c0, size_t nr, size_t nc, float *buf, size_t ld,
               int tr) {
    tri_st_piece p = {r0, c0, nr, nc, buf, ld, tr};
    return tri_st_write_piece(fd, L, e, &p);
}

/* Output column of the fused [q|k|v] held locally at row o by `rank`. */
static size_t qkv_col(int rank, size_t o) {
    size_t part = o / 4, k = o % 4;
    return part * C + (size_t)rank * 4 + k;
}

/* What one rank owns, as it would hold it in memory; returns 0 on success. */
static int rank_write(int rank, const char *path, const tri_st_layout *L) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return 1;
    int bad = 0;

    /* 0 wte: vocab rows, full width; rank 1 keeps a padded row stride. */
    {
        size_t r0 = (size_t)rank * 17, nr = (r0 + 17 > V ? V : r0 + 17) - r0;
        size_t ld = rank == 1 ? 15 : C;
        float *b = alloc_nan(nr * ld);
        for (size_t i = 0; i < nr; i++)
            for (size_t j = 0; j < C; j++) b[i * ld + j] = cf(0, r0 + i, j);
        bad |= put(fd, L, 0, r0, 0, nr, C, b, ld, 0);
        free(b);
    }
    /* 1 wpe: split by columns between ranks 0 and 1 (one write per row). */
    if (rank < 2) {
        size_t c0 = rank == 0 ? 0 : 5, nc = rank == 0 ? 5 : 7, ld = rank == 0 ? 7 : 9;
        float *b = alloc_nan(T * ld);
        for (size_t i = 0; i < T; i++)
            for (size_t j = 0; j < nc; j++) b[i * ld + j] = cf(1, i, c0 + j);
        bad |= put(fd, L, 1, 0, c0, T, nc, b, ld, 0);
        free(b);
    }
    /* 2 c_attn.weight: column-parallel, memory [out=12 (q_r|k_r|v_r), in=12],
     * stored [in, 3C]: three transposed column ranges. */
    {
        float *b = alloc_nan(12 * C);
        for (size_t o = 0; o < 12; o++)
            for (size_t i = 0; i < C; i++) b[o * C + i] = cf(2, i, qkv_col(rank, o));
        for (size_t part = 0; part < 3; part++)
            bad |= put(fd, L, 2, 0, qkv_col(rank, 4 * part), C, 4, b + part * 4 * C, C, 1);
        free(b);
    }
    /* 3 c_attn.bias: the same split, 1-D. */
    {
        float b[12];
        for (size_t o = 0; o < 12; o++) b[o] = cf(3, 0, qkv_col(rank, o));
        for (size_t part = 0; part < 3; part++)
            bad |= put(fd, L, 3, 0, qkv_col(rank, 4 * part), 1, 4, b + 4 * part, 4, 0);
    }
    /* 4 c_proj.weight: row-parallel, memory [out=12, in_slice=4] (ld 5),
     * stored rows [4r, 4r+4) full width: one transposed tile. */
    {
        size_t ld = 5;
        float *b = alloc_nan(C * ld);
        for (size_t o = 0; o < C; o++)
            for (size_t ii = 0; ii < 4; ii++) b[o * ld + ii] = cf(4, 4 * (size_t)rank + ii, o);
        bad |= put(fd, L, 4, 4 * (size_t)rank, 0, 4, C, b, ld, 1);
        free(b);
    }
    /* 5 ln_1.weight: replicated, written by its owner (rank 0) only. */
    if (rank == 0) {
        float b[C];
        for (size_t j = 0; j < C; j++) b[j] = cf(5, 0, j);
        bad |= put(fd, L, 5, 0, 0, 1, C, b, C, 0);
    }
    /* 6 big.weight: ranks 1 and 2 own column ranges, transposed (several
     * staging tiles, one write per row). */
    if (rank > 0) {
        size_t c0 = rank == 1 ? 0 : 600, nc = rank == 1 ? 600 : 400;
        float *b = alloc_nan(nc * BIG_R);
        for (size_t j = 0; j < nc; j++)
            for (size_t i = 0; i < BIG_R; i++) b[j * BIG_R + i] = cf(6, i, c0 + j);
        bad |= put(fd, L, 6, 0, c0, BIG_R, nc, b, BIG_R, 1);
        free(b);
    }
    /* 7 big2.weight: rank 0, whole, transposed, padded stride (two full-width tiles). */
    if (rank == 0) {
        size_t ld = BIG2_R + 3;
        float *b = alloc_nan(BIG2_C * ld);
        for (size_t j = 0; j < BIG2_C; j++)
            for (size_t i = 0; i < BIG2_R; i++) b[j * ld + i] = cf(7, i, j);
        bad |= put(fd, L, 7, 0, 0, BIG2_R, BIG2_C, b, ld, 1);
        free(b);
    }
    /* 8 long.bias: a row longer than the staging buffer, transposed [n, 1]. */
    if (rank == 2) {
        float *b = alloc_nan(LONG_N);
        for (size_t j = 0; j < LONG_N; j++) b[j] = cf(8, 0, j);
        bad |= put(fd, L, 8, 0, 0, 1, LONG_N, b, 1, 1);
        free(b);
    }
    if (close(fd) != 0) bad = 1;
    return bad ? 1 : 0;
}

static const char CHECK_PY[] =
    "#!/usr/bin/python3\n"
    "# Independent reader: parses the safetensors bytes itself.\n"
    "import json, struct, sys\n"
    "import numpy as np\n"
    "EXPECT = [('transformer.wte.weight', [50, 12]), ('transformer.wpe.weight', [20, 12]),\n"
    "          ('transformer.h.0.attn.c_attn.weight', [12, 36]),\n"
    "          ('transformer.h.0.attn.c_attn.bias', [36]),\n"
    "          ('transformer.h.0.attn.c_proj.weight', [12, 12]),\n"
    "          ('transformer.h.0.ln_1.weight', [12]), ('big.weight', [3000, 1000]),\n"
    "          ('big2.weight', [1100, 1000]), ('long.bias', [1200000])]\n"
    "def closed(e, shape):\n"
    "    cols = shape[-1] if shape else 1\n"
    "    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1\n"
    "    r = np.arange(rows, dtype=np.int64)[:, None]\n"
    "    c = np.arange(cols, dtype=np.int64)[None, :]\n"
    "    h = (e * 1000003 + r * 4099 + c) % 4194301\n"
    "    return ((h - 2097150).astype(np.float64) + 0.5).astype(np.float32).reshape(shape)\n"
    "raw = open(sys.argv[1], 'rb').read()\n"
    "fail = []\n"
    "n = struct.unpack('<Q', raw[:8])[0]\n"
    "if (8 + n) % 8 != 0: fail.append('header length %d: data not 8-aligned' % n)\n"
    "hdr = json.loads(raw[8:8 + n].decode('utf-8'))\n"
    "meta = hdr.pop('__metadata__', None)\n"
    "if meta != {'format': 'pt', 'writer': 'test \"q\"'}: fail.append('metadata %r' % meta)\n"
    "data = raw[8 + n:]\n"
    "if sorted(hdr) != sorted(k for k, _ in EXPECT): fail.append('names %r' % sorted(hdr))\n"
    "spans = []\n"
    "for e, (name, shape) in enumerate(EXPECT):\n"
    "    t = hdr.get(name)\n"
    "    if t is None: continue\n"
    "    if t['dtype'] != 'F32' or t['shape'] != shape:\n"
    "        fail.append('%s: %s %r' % (name, t['dtype'], t['shape'])); continue\n"
    "    b, en = t['data_offsets']\n"
    "    spans.append((b, en))\n"
    "    if en - b != 4 * int(np.prod(shape)): fail.append('%s: offsets %r' % (name, [b, en])); continue\n"
    "    got = np.frombuffer(data[b:en], dtype='<f4').reshape(shape)\n"
    "    want = closed(e, shape)\n"
    "    if not np.array_equal(got, want):\n"
    "        bad = np.argwhere(~(got == want))\n"
    "        i = tuple(bad[0])\n"
    "        fail.append('%s: %d elements differ, first at %r: %r, expected %r'\n"
    "                    % (name, len(bad), i, got[i], want[i]))\n"
    "spans.sort()\n"
    "pos = 0\n"
    "for b, en in spans:\n"
    "    if b != pos: fail.append('hole or overlap at %d' % b)\n"
    "    pos = en\n"
    "if pos != len(data): fail.append('data section %d bytes, tensors end at %d' % (len(data), pos))\n"
    "for f in fail: print('python reader:', f)\n"
    "sys.exit(1 if fail else 0)\n";

Test(safetensors, pieces_from_three_processes_read_by_python) {
    char dir[64], path[128], script[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(script, sizeof script, "%s/check.py", dir);
    tri_st_layout L;
    build_layout(&L);
    cr_assert_eq(tri_st_create(path, &L, "{\"format\": \"pt\", \"writer\": \"test \\\"q\\\"\"}"), 0);

    /* "ranks" as processes writing into the one file at the same time */
    pid_t pids[NRANKS];
    for (int r = 0; r < NRANKS; r++) {
        pids[r] = fork();
        cr_assert(pids[r] >= 0);
        if (pids[r] == 0) _exit(rank_write(r, path, &L));
    }
    for (int r = 0; r < NRANKS; r++) {
        int st = 0;
        cr_assert_eq(waitpid(pids[r], &st, 0), pids[r]);
        cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "rank %d failed", r);
    }

    write_text(script, CHECK_PY);
    cr_assert_eq(run_python(script, path), 0, "the python reader disagrees (see above)");
    tri_st_layout_free(&L);
    tri_st_layout_free(&L); /* NULL-safe twice: zeroed */
    cr_assert_null(L.entries);
    remove_dir(dir);
}

/* Reads back the multi-rank file through tri_st_open and boxes of every kind. */
Test(safetensors, read_back_boxes_of_every_kind) {
    char dir[64], path[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    tri_st_layout L;
    build_layout(&L);
    cr_assert_eq(tri_st_create(path, &L, NULL), 0);
    for (int r = 0; r < NRANKS; r++) cr_assert_eq(rank_write(r, path, &L), 0);

    tri_st_file f;
    cr_assert_eq(tri_st_open(&f, path), 0);
    cr_assert_eq(f.layout.n, L.n);
    for (size_t e = 0; e < L.n; e++) {
        const tri_st_entry *a = &f.layout.entries[e], *b = &L.entries[e];
        cr_assert_str_eq(a->name, b->name);
        cr_assert(a->begin == b->begin && a->end == b->end && a->rows == b->rows && a->cols == b->cols &&
                  a->ndim == b->ndim);
    }
    cr_assert_null(tri_st_get_metadata(&f, "format"));

    /* every tensor whole, non-transposed */
    for (int e = 0; e < (int)L.n; e++) {
        const tri_st_entry *t = &f.layout.entries[e];
        float *b = alloc_nan(tri_st_numel(t));
        tri_st_piece p = {0, 0, t->rows, t->cols, b, t->cols, 0};
        cr_assert_eq(tri_st_read_piece(f.fd, &f.layout, e, &p), 0);
        for (size_t i = 0; i < t->rows; i++)
            for (size_t j = 0; j < t->cols; j++)
                if (!(b[i * t->cols + j] == cf(e, i, j)))
                    cr_assert_fail("%s (%zu, %zu): %g, expected %g", t->name, i, j, b[i * t->cols + j], cf(e, i, j));
        free(b);
    }
    /* transposed column ranges with padding that must stay untouched */
    struct {
        int e;
        size_t r0, c0, nr, nc, pad;
    } boxes[] = {
        {2, 0, 5, 12, 24, 1},       /* one tile, per-row reads          */
        {4, 3, 0, 7, 12, 2},        /* full width: one read per tile    */
        {6, 11, 100, 2989, 600, 0}, /* several tiles, per-row reads     */
        {8, 0, 7, 1, 1100000, 0},   /* a row split across stage columns */
        {0, 10, 3, 20, 7, 3},       /* non-transposed, strided rows     */
        {7, 0, 0, 1100, 1000, 5},   /* non-transposed full width, staged */
    };
    for (size_t k = 0; k < sizeof boxes / sizeof *boxes; k++) {
        int tr = k < 4;
        size_t outer = tr ? boxes[k].nc : boxes[k].nr, inner = tr ? boxes[k].nr : boxes[k].nc;
        size_t ld = inner + boxes[k].pad;
        float *b = alloc_nan(outer * ld);
        tri_st_piece p = {boxes[k].r0, boxes[k].c0, boxes[k].nr, boxes[k].nc, b, ld, tr};
        cr_assert_eq(tri_st_read_piece(f.fd, &f.layout, boxes[k].e, &p), 0);
        for (size_t o = 0; o < outer; o++)
            for (size_t q = 0; q < ld; q++) {
                float got = b[o * ld + q];
                if (q >= inner) {
                    if (!isnan(got)) cr_assert_fail("box %zu: padding at (%zu, %zu) overwritten", k, o, q);
                    continue;
                }
                size_t i = tr ? q : o, j = tr ? o : q;
                float want = cf(boxes[k].e, boxes[k].r0 + i, boxes[k].c0 + j);
                if (!(got == want)) cr_assert_fail("box %zu (%zu, %zu): %g, expected %g", k, i, j, got, want);
            }
        free(b);
    }
    /* empty boxes are no-ops, even with a NULL buffer */
    tri_st_piece empty = {3, 2, 0, 5, NULL, 0, 0};
    cr_assert_eq(tri_st_read_piece(f.fd, &f.layout, 0, &empty), 0);
    tri_st_close(&f);
    cr_assert_eq(f.fd, -1);
    tri_st_close(&f);
    tri_st_close(NULL);
    tri_st_layout_free(&L);
    remove_dir(dir);
}

/* ------------------------------------------------ a file from python */

static const char WRITE_PY[] =
    "#!/usr/bin/python3\n"
    "import json, struct, sys\n"
    "import numpy as np\n"
    "T = [('a.weight', [7, 5]), ('b.bias', [9]), ('c.three', [2, 3, 4]), ('d.scalar', []),\n"
    "     ('e.empty', [0, 3]), ('f.big', [300, 257])]\n"
    "def closed(e, shape):\n"
    "    cols = shape[-1] if shape else 1\n"
    "    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1\n"
    "    r = np.arange(rows, dtype=np.int64)[:, None]\n"
    "    c = np.arange(cols, dtype=np.int64)[None, :]\n"
    "    h = (e * 1000003 + r * 4099 + c) % 4194301\n"
    "    return ((h - 2097150).astype(np.float64) + 0.5).astype(np.float32).reshape(shape)\n"
    "hdr, blobs, off = {}, [], 0\n"
    "for e in reversed(range(len(T))):  # data in the opposite order of the header\n"
    "    b = closed(e, T[e][1]).astype('<f4').tobytes()\n"
    "    hdr[T[e][0]] = {'dtype': 'F32', 'shape': T[e][1], 'data_offsets': [off, off + len(b)]}\n"
    "    blobs.append(b)\n"
    "    off += len(b)\n"
    "ordered = {k: hdr[k] for k, _ in T}\n"
    "ordered['__metadata__'] = {'format': 'pt', 'step': '42'}\n"
    "h = json.dumps(ordered, indent=1).encode('utf-8')\n"
    "h += b' ' * ((8 - (8 + len(h)) % 8) % 8)\n"
    "with open(sys.argv[1], 'wb') as f:\n"
    "    f.write(struct.pack('<Q', len(h)) + h + b''.join(blobs))\n";

Test(safetensors, reads_a_file_written_by_python) {
    char dir[64], path[128], script[128];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/py.safetensors", dir);
    snprintf(script, sizeof script, "%s/write.py", dir);
    write_text(script, WRITE_PY);
    cr_assert_eq(run_python(script, path), 0);

    tri_st_file f;
    cr_assert_eq(tri_st_open(&f, path), 0);
    cr_assert_eq(f.layout.n, 6);
    cr_assert_str_eq(tri_st_get_metadata(&f, "format"), "pt");
    cr_assert_str_eq(tri_st_get_metadata(&f, "step"), "42");
    cr_assert_null(tri_st_get_metadata(&f, "nope"));

    const char *names[] = {"a.weight", "b.bias", "c.three", "d.scalar", "e.empty", "f.big"};
    const size_t shapes[][3] = {{7, 5}, {9}, {2, 3, 4}, {0}, {0, 3}, {300, 257}};
    const int ndims[] = {2, 1, 3, 0, 2, 2};
    const size_t views[][2] = {{7, 5}, {1, 9}, {6, 4}, {1, 1}, {0, 3}, {300, 257}};
    for (int e = 0; e < 6; e++) {
        int idx = tri_st_expect(&f, names[e], ndims[e], shapes[e]);
        cr_assert_geq(idx, 0, "%s", names[e]);
        const tri_st_entry *t = &f.layout.entries[idx];
        cr_assert(t->rows == views[e][0] && t->cols == views[e][1], "%s view", names[e]);
        size_t n = views[e][0] * views[e][1];
        float *b = alloc_nan(n + 1);
        tri_st_piece p = {0, 0, t->rows, t->cols, b, t->cols, 0};
        cr_assert_eq(tri_st_read_piece(f.fd, &f.layout, idx, &p), 0);
        for (size_t i = 0; i < t->rows; i++)
            for (size_t j = 0; j < t->cols; j++)
                if (!(b[i * t->cols + j] == cf(e, i, j)))
                    cr_assert_fail("%s (%zu, %zu): %g, expected %g", names[e], i, j, b[i * t->cols + j], cf(e, i, j));
        cr_assert(isnan(b[n]), "%s: wrote past the box", names[e]);
        free(b);
    }
    /* a transposed sub-box of f.big: rows [17, 290), cols [3, 250) */
    int idx = tri_st_layout_find(&f.layout, "f.big");
    size_t nr = 273, nc = 247, ld = nr + 4;
    float *b = alloc_nan(nc * ld);
    tri_st_piece p = {17, 3, nr, nc, b, ld, 1};
    cr_assert_eq(tri_st_read_piece(f.fd, &f.layout, idx, &p), 0);
    for (size_t j = 0; j < nc; j++)
        for (size_t i = 0; i < nr; i++)
            if (!(b[j * ld + i] == cf(5, 17 + i, 3 + j))) cr_assert_fail("f.big T (%zu, %zu): %g", i, j, b[j * ld + i]);
    free(b);
    tri_st_close(&f);
    remove_dir(dir);
}

/* ------------------------------------------------------------ errors */

/* A file with header text `json` (padded) and `data` zero bytes; `len` != 0
 * overrides the header length field. */
static void write_raw(const char *path, const char *json, size_t data, uint64_t len) {
    size_t h = strlen(json), pad = (8 - (8 + h) % 8) % 8;
    uint64_t n = len ? len : (uint64_t)(h + pad);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    unsigned char b8[8];
    for (int i = 0; i < 8; i++) b8[i] = (unsigned char)(n >> (8 * i));
    cr_assert_eq(fwrite(b8, 1, 8, f), 8);
    cr_assert_eq(fwrite(json, 1, h, f), h);
    for (size_t i = 0; i < pad; i++) fputc(' ', f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    cr_assert_eq(fclose(f), 0);
}

static void expect_open_error(const char *dir, const char *path, const char *const *must) {
    capture cap;
    tri_st_file f;
    cap_begin(&cap, dir);
    int rc = tri_st_open(&f, path);
    char *msg = cap_end(&cap);
    cr_assert_eq(rc, -1, "opened a bad file %s", path);
    cr_assert_eq(f.fd, -1);
    cr_assert_null(f.layout.entries);
    check_message(msg, must);
    free(msg);
    tri_st_close(&f);
}

#define TENSOR(name, dt, shape, b, e) \
    "\"" name "\": {\"dtype\": \"" dt "\", \"shape\": " shape ", \"data_offsets\": [" #b ", " #e "]}"

Test(safetensors, open_errors_name_file_and_tensor) {
    char dir[64], path[160];
    make_dir(dir, sizeof dir);

    /* truncated: the last tensor's data runs past the end */
    {
        snprintf(path, sizeof path, "%s/truncated.safetensors", dir);
        tri_st_layout L = {0};
        size_t s1[] = {4, 3}, s2[] = {5};
        cr_assert_eq(tri_st_layout_add(&L, "first.w", 2, s1), 0);
        cr_assert_eq(tri_st_layout_add(&L, "second.b", 1, s2), 1);
        cr_assert_eq(tri_st_create(path, &L, NULL), 0);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(truncate(path, st.st_size - 4), 0);
        const char *must[] = {path, "second.b", "truncated", NULL};
        expect_open_error(dir, path, must);
        tri_st_layout_free(&L);
    }
    /* header length beyond the file */
    {
        snprintf(path, sizeof path, "%s/badlen.safetensors", dir);
        write_raw(path, "{}", 0, (uint64_t)1 << 40);
        const char *must[] = {path, "header length 1099511627776", NULL};
        expect_open_error(dir, path, must);
    }
    /* shorter than the 8-byte length */
    {
        snprintf(path, sizeof path, "%s/tiny.safetensors", dir);
        write_text(path, "abc");
        const char *must[] = {path, "3 bytes", NULL};
        expect_open_error(dir, path, must);
    }
    /* bad JSON */
    {
        snprintf(path, sizeof path, "%s/badjson.safetensors", dir);
        write_raw(path, "{" TENSOR("w", "F32", "[2]", 0, 8), 8, 0);
        const char *must[] = {path, "not valid JSON", NULL};
        expect_open_error(dir, path, must);
    }
    /* a dtype other than F32, BF16, F16 */
    {
        snprintf(path, sizeof path, "%s/f64.safetensors", dir);
        write_raw(path, "{" TENSOR("ok.w", "F32", "[2]", 0, 8) ", " TENSOR("h.f64", "F64", "[2]", 8, 24) "}", 24, 0);
        const char *must[] = {path, "h.f64", "F64", NULL};
        expect_open_error(dir, path, must);
    }
    /* offsets past the data section */
    {
        snprintf(path, sizeof path, "%s/range.safetensors", dir);
        write_raw(path, "{" TENSOR("x", "F32", "[2]", 0, 8) ", " TENSOR("y.far", "F32", "[2]", 8, 16) "}", 12, 0);
        const char *must[] = {path, "y.far", "[8, 16]", "12 bytes", NULL};
        expect_open_error(dir, path, must);
    }
    /* offsets inconsistent with the shape */
    {
        snprintf(path, sizeof path, "%s/size.safetensors", dir);
        write_raw(path, "{" TENSOR("z.w", "F32", "[2, 2]", 0, 12) "}", 12, 0);
        const char *must[] = {path, "z.w", "[2, 2]", "12 bytes", NULL};
        expect_open_error(dir, path, must);
    }
    /* overlapping tensors */
    {
        snprintf(path, sizeof path, "%s/overlap.safetensors", dir);
        write_raw(path, "{" TENSOR("p.a", "F32", "[2]", 0, 8) ", " TENSOR("p.b", "F32", "[2]", 4, 12) "}", 12, 0);
        const char *must[] = {path, "p.a", "p.b", "overlap", NULL};
        expect_open_error(dir, path, must);
    }
    /* bytes after the last tensor */
    {
        snprintf(path, sizeof path, "%s/trailing.safetensors", dir);
        write_raw(path, "{" TENSOR("q", "F32", "[2]", 0, 8) "}", 20, 0);
        const char *must[] = {path, "12 bytes after", NULL};
        expect_open_error(dir, path, must);
    }
    /* metadata value that is not a string */
    {
        snprintf(path, sizeof path, "%s/meta.safetensors", dir);
        write_raw(path, "{\"__metadata__\": {\"step\": 42}, " TENSOR("q", "F32", "[2]", 0, 8) "}", 8, 0);
        const char *must[] = {path, "__metadata__.step", NULL};
        expect_open_error(dir, path, must);
    }
    /* a missing file */
    {
        snprintf(path, sizeof path, "%s/missing.safetensors", dir);
        const char *must[] = {path, "No such file", NULL};
        expect_open_error(dir, path, must);
    }
    remove_dir(dir);
}

Test(safetensors, shape_check_and_piece_errors_name_both) {
    char dir[64], path[160], other[160];
    make_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    tri_st_layout L = {0};
    size_t s[] = {6, 4}, sb[] = {4};
    cr_assert_eq(tri_st_layout_add(&L, "m.weight", 2, s), 0);
    cr_assert_eq(tri_st_layout_add(&L, "m.bias", 1, sb), 1);
    cr_assert_eq(tri_st_layout_find(&L, "m.bias"), 1);
    cr_assert_eq(tri_st_layout_find(&L, "m.none"), -1);
    cr_assert_eq(tri_st_create(path, &L, "{\"format\": \"pt\"}"), 0);

    capture cap;
    char *msg;
    /* layout misuse */
    cap_begin(&cap, dir);
    int rc = tri_st_layout_add(&L, "m.bias", 1, sb);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"m.bias", "twice", NULL});
    free(msg);

    tri_st_file f;
    cr_assert_eq(tri_st_open(&f, path), 0);
    cr_assert_str_eq(tri_st_get_metadata(&f, "format"), "pt");
    size_t want[] = {4, 6};
    cap_begin(&cap, dir);
    rc = tri_st_expect(&f, "m.weight", 2, want);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){path, "m.weight", "[6, 4]", "[4, 6]", NULL});
    free(msg);
    cap_begin(&cap, dir);
    rc = tri_st_expect(&f, "m.gone", 1, sb);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){path, "m.gone", NULL});
    free(msg);
    cr_assert_eq(tri_st_expect(&f, "m.bias", 1, sb), 1);
    tri_st_close(&f);

    /* a box outside the tensor */
    int fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    float buf[64] = {0};
    tri_st_piece p = {5, 0, 2, 4, buf, 4, 0};
    cap_begin(&cap, dir);
    rc = tri_st_write_piece(fd, &L, 0, &p);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){path, "m.weight", "out of range", NULL});
    free(msg);
    /* a stride too small for the box */
    tri_st_piece q = {0, 0, 2, 4, buf, 3, 0};
    cap_begin(&cap, dir);
    rc = tri_st_read_piece(fd, &L, 0, &q);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){path, "m.weight", "ld 3", NULL});
    free(msg);
    close(fd);

    /* a file made with another layout: readable fd, the header's N disagrees */
    snprintf(other, sizeof other, "%s/other.safetensors", dir);
    tri_st_layout L2 = {0};
    size_t s2[] = {6, 5};
    cr_assert_eq(tri_st_layout_add(&L2, "m.weight", 2, s2), 0);
    cr_assert_eq(tri_st_create(other, &L2, NULL), 0);
    fd = open(other, O_RDWR);
    cr_assert_geq(fd, 0);
    tri_st_piece r = {0, 0, 1, 4, buf, 4, 0};
    cap_begin(&cap, dir);
    rc = tri_st_write_piece(fd, &L, 1, &r);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){other, "m.bias", "another layout", NULL});
    free(msg);
    close(fd);
    /* ... write-only fd, a file too short for this layout's data */
    tri_st_layout L3 = {0};
    size_t s3[] = {1};
    cr_assert_eq(tri_st_layout_add(&L3, "tiny", 1, s3), 0);
    cr_assert_eq(tri_st_create(other, &L3, NULL), 0);
    fd = open(other, O_WRONLY);
    cr_assert_geq(fd, 0);
    cap_begin(&cap, dir);
    rc = tri_st_write_piece(fd, &L, 1, &r);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){other, "m.bias", "another layout", NULL});
    free(msg);
    close(fd);
    tri_st_layout_free(&L3);
    /* a read-only descriptor: the write itself fails and says so */
    close(fd);
    fd = open(path, O_RDONLY);
    tri_st_piece w = {0, 0, 6, 4, buf, 4, 0};
    cap_begin(&cap, dir);
    rc = tri_st_write_piece(fd, &L, 0, &w);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){path, "m.weight", "write of 96 bytes", NULL});
    free(msg);
    close(fd);

    /* metadata that is not an object of strings */
    cap_begin(&cap, dir);
    rc = tri_st_create(other, &L, "{\"n\": 3}");
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){other, "\"n\"", NULL});
    free(msg);

    tri_st_layout_free(&L);
    tri_st_layout_free(&L2);
    tri_st_layout_free(NULL);
    remove_dir(dir);
}
