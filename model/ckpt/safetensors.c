/* safetensors files written and read in pieces (see safetensors.h). */
#include "model/ckpt/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/half.h"
#include "base/file.h"
#include "base/err.h"

#define ELEM         ((size_t)sizeof(float)) /* the pieces' element: fp32 in memory */
#define METADATA_KEY "__metadata__"

/* ---------------------------------------------------------------- helpers */

/* The path behind fd, for messages (Linux /proc; "fd N" elsewhere). */
static const char *fd_name(int fd, char *buf, size_t n) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t k = readlink(link, buf, n - 1);
    if (k < 0) {
        snprintf(buf, n, "fd %d", fd);
        return buf;
    }
    buf[k] = '\0';
    return buf;
}

/* "[a, b, c]" */
static const char *fmt_shape(char *buf, size_t n, int ndim, const size_t *shape) {
    size_t k = 0;
    k += (size_t)snprintf(buf, n, "[");
    for (int d = 0; d < ndim && k < n; d++) k += (size_t)snprintf(buf + k, n - k, d ? ", %zu" : "%zu", shape[d]);
    if (k < n) snprintf(buf + k, n - k, "]");
    return buf;
}

/* rows * cols * esz of shape[ndim] with overflow checks; 0 on success. */
static int shape_bytes(int ndim, const size_t *shape, size_t esz, size_t *rows, size_t *cols, uint64_t *bytes) {
    size_t r = 1, c = ndim > 0 ? shape[ndim - 1] : 1;
    for (int d = 0; d < ndim - 1; d++) {
        if (shape[d] != 0 && r > SIZE_MAX / shape[d]) return -1;
        r *= shape[d];
    }
    if (c != 0 && r > SIZE_MAX / c) return -1;
    size_t numel = r * c;
    if (numel > (SIZE_MAX / ELEM) || (uint64_t)numel > UINT64_MAX / ELEM) return -1;
    *rows = r;
    *cols = c;
    *bytes = (uint64_t)numel * esz;
    return 0;
}

static void put_le64(unsigned char *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get_le64(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* Writes all `bytes` at `off`, retrying short writes and EINTR. */
static int pwrite_all(int fd, const void *ptr, size_t bytes, uint64_t off, int *err) {
    const char *p = ptr;
    while (bytes > 0) {
        ssize_t k = pwrite(fd, p, bytes, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            *err = errno;
            return -1;
        }
        if (k == 0) {
            *err = ENOSPC;
            return -1;
        }
        p += k;
        bytes -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* Reads all `bytes` at `off`; hitting end of file is an error (*err = 0). */
static int pread_all(int fd, void *ptr, size_t bytes, uint64_t off, int *err) {
    char *p = ptr;
    while (bytes > 0) {
        ssize_t k = pread(fd, p, bytes, (off_t)off);
        if (k < 0) {
            if (errno == EINTR) continue;
            *err = errno;
            return -1;
        }
        if (k == 0) {
            *err = 0;
            return -1;
        }
        p += k;
        bytes -= (size_t)k;
        off += (uint64_t)k;
    }
    return 0;
}

/* ----------------------------------------------------------------- layout */

void tri_st_layout_init(tri_st_layout *L) { memset(L, 0, sizeof *L); }

size_t tri_st_numel(const tri_st_entry *e) { return e->rows * e->cols; }

int tri_st_layout_find(const tri_st_layout *L, const char *name) {
    if (!L || !name) return -1;
    for (size_t i = 0; i < L->n; i++)
        if (strcmp(L->entries[i].name, name) == 0) return (int)i;
    return -1;
}

/* Appends an entry at [begin, end); the caller has checked everything else. */
static int push_entry(tri_st_layout *L, const char *name, tri_dtype dtype, int ndim, const size_t *shape, size_t rows,
                      size_t cols, uint64_t begin, uint64_t end) {
    if (L->n >= (size_t)INT32_MAX) {
        tri_error("safetensors layout: too many tensors");
        return -1;
    }
    if (L->n == L->cap) {
        size_t cap = L->cap ? 2 * L->cap : 64;
        tri_st_entry *e = realloc(L->entries, cap * sizeof *e);
        if (!e) {
            tri_error("safetensors layout: out of memory at tensor %s", name);
            return -1;
        }
        L->entries = e;
        L->cap = cap;
    }
    tri_st_entry *e = &L->entries[L->n];
    memset(e, 0, sizeof *e);
    e->name = strdup(name);
    if (!e->name) {
        tri_error("safetensors layout: out of memory at tensor %s", name);
        return -1;
    }
    e->dtype = dtype;
    e->ndim = ndim;
    for (int d = 0; d < ndim; d++) e->shape[d] = shape[d];
    e->rows = rows;
    e->cols = cols;
    e->begin = begin;
    e->end = end;
    return (int)L->n++;
}

const char *tri_st_dtype_name(tri_dtype t) {
    return t == TRI_F32 ? "F32" : t == TRI_BF16 ? "BF16" : t == TRI_F16 ? "F16" : NULL;
}

int tri_st_layout_add(tri_st_layout *L, const char *name, int ndim, const size_t *shape) {
    return tri_st_layout_add_dtype(L, name, TRI_F32, ndim, shape);
}

int tri_st_layout_add_dtype(tri_st_layout *L, const char *name, tri_dtype dtype, int ndim, const size_t *shape) {
    if (!tri_st_dtype_name(dtype)) {
        tri_error("safetensors layout: tensor %s: dtype %d is not F32, BF16 or F16", name ? name : "(null)",
                  (int)dtype);
        return -1;
    }
    if (!name || !name[0] || strcmp(name, METADATA_KEY) == 0) {
        tri_error("safetensors layout: invalid tensor name \"%s\"", name ? name : "(null)");
        return -1;
    }
    if (ndim < 0 || ndim > TRI_ST_MAX_DIM || (ndim > 0 && !shape)) {
        tri_error("safetensors layout: tensor %s: ndim %d not in 0..%d", name, ndim, TRI_ST_MAX_DIM);
        return -1;
    }
    if (tri_st_layout_find(L, name) >= 0) {
        tri_error("safetensors layout: tensor %s added twice", name);
        return -1;
    }
    size_t rows, cols;
    uint64_t bytes;
    char sh[256];
    if (shape_bytes(ndim, shape, tri_dtype_size(dtype), &rows, &cols, &bytes) != 0 ||
        bytes > UINT64_MAX - L->data_bytes) {
        tri_error("safetensors layout: tensor %s: shape %s is too large", name, fmt_shape(sh, sizeof sh, ndim, shape));
        return -1;
    }
    int idx = push_entry(L, name, dtype, ndim, shape, rows, cols, L->data_bytes, L->data_bytes + bytes);
    if (idx >= 0) L->data_bytes += bytes;
    return idx;
}

void tri_st_layout_free(tri_st_layout *L) {
    if (!L) return;
    for (size_t i = 0; i < L->n; i++) free(L->entries[i].name);
    free(L->entries);
    memset(L, 0, sizeof *L);
}

/* ----------------------------------------------------------------- header */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *s, const char *t, size_t len) {
    if (s->oom) return;
    if (s->n + len + 1 > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->n + len + 1) cap *= 2;
        char *p = realloc(s->p, cap);
        if (!p) {
            s->oom = 1;
            return;
        }
        s->p = p;
        s->cap = cap;
    }
    memcpy(s->p + s->n, t, len);
    s->n += len;
    s->p[s->n] = '\0';
}

static void sb_puts(sbuf *s, const char *t) { sb_put(s, t, strlen(t)); }

static void sb_printf(sbuf *s, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp) {
        s->oom = 1; /* only used for short numeric pieces */
        return;
    }
    sb_put(s, tmp, (size_t)k);
}

/* A JSON string literal for `t` (UTF-8 passes through). */
static void sb_json_string(sbuf *s, const char *t) {
    sb_put(s, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)t; *c; c++) {
        if (*c == '"' || *c == '\\') {
            char esc[2] = {'\\', (char)*c};
            sb_put(s, esc, 2);
        } else if (*c < 0x20) {
            sb_printf(s, "\\u%04x", *c);
        } else {
            sb_put(s, (const char *)c, 1);
        }
    }
    sb_put(s, "\"", 1);
}

/* The header JSON for L (without padding); NULL after printing an error. */
static char *build_header(const char *path, const tri_st_layout *L, const char *metadata, size_t *len) {
    sbuf s = {0};
    sb_puts(&s, "{");
    int first = 1;
    if (metadata) {
        const char *end = NULL;
        cJSON *m = cJSON_ParseWithOpts(metadata, &end, 1);
        if (!m || !cJSON_IsObject(m)) {
            if (!m)
                tri_error("%s: metadata is not valid JSON (error at byte %td)", path,
                          end ? end - metadata : (ptrdiff_t)0);
            else
                tri_error("%s: metadata is not a JSON object", path);
            cJSON_Delete(m);
            free(s.p);
            return NULL;
        }
        for (cJSON *it = m->child; it; it = it->next) {
            if (!cJSON_IsString(it)) {
                tri_error("%s: metadata key \"%s\": expected a string value", path, it->string);
                cJSON_Delete(m);
                free(s.p);
                return NULL;
            }
        }
        char *txt = cJSON_PrintUnformatted(m);
        cJSON_Delete(m);
        if (!txt) {
            free(s.p);
            tri_error("%s: out of memory printing metadata", path);
            return NULL;
        }
        sb_puts(&s, "\"" METADATA_KEY "\":");
        sb_puts(&s, txt);
        cJSON_free(txt);
        first = 0;
    }
    for (size_t i = 0; i < L->n; i++) {
        const tri_st_entry *e = &L->entries[i];
        if (!first) sb_puts(&s, ",");
        first = 0;
        sb_json_string(&s, e->name);
        sb_puts(&s, ":{\"dtype\":\"");
        sb_puts(&s, tri_st_dtype_name(e->dtype));
        sb_puts(&s, "\",\"shape\":[");
        for (int d = 0; d < e->ndim; d++) sb_printf(&s, d ? ",%zu" : "%zu", e->shape[d]);
        sb_printf(&s, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", e->begin, e->end);
    }
    sb_puts(&s, "}");
    if (s.oom) {
        tri_error("%s: out of memory building the header", path);
        free(s.p);
        return NULL;
    }
    *len = s.n;
    return s.p;
}

int tri_st_create(const char *path, const tri_st_layout *L, const char *metadata) {
    size_t hlen;
    char *hdr = build_header(path, L, metadata, &hlen);
    if (!hdr) return -1;
    size_t pad = (8 - (8 + hlen) % 8) % 8;
    size_t n = hlen + pad;
    unsigned char *buf = malloc(8 + n);
    if (!buf) {
        free(hdr);
        tri_error("%s: out of memory (header of %zu bytes)", path, n);
        return -1;
    }
    put_le64(buf, (uint64_t)n);
    memcpy(buf + 8, hdr, hlen);
    memset(buf + 8 + hlen, ' ', pad);
    free(hdr);

    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        tri_error("%s: cannot create: %s", path, strerror(errno));
        free(buf);
        return -1;
    }
    int err = 0, rc = 0;
    uint64_t total = 8 + (uint64_t)n + L->data_bytes;
    if (pwrite_all(fd, buf, 8 + n, 0, &err) != 0) {
        tri_error("%s: writing the header (%zu bytes): %s", path, 8 + n, strerror(err));
        rc = -1;
    } else if (ftruncate(fd, (off_t)total) != 0) {
        tri_error("%s: sizing the file to %" PRIu64 " bytes: %s", path, total, strerror(errno));
        rc = -1;
    }
    free(buf);
    if (close(fd) != 0 && rc == 0) {
        tri_error("%s: close: %s", path, strerror(errno));
        rc = -1;
    }
    return rc;
}

/* ----------------------------------------------------------------- pieces */

typedef struct io_ctx {
    int fd;
    int writing;
    const tri_st_entry *e;
    uint64_t base;  /* file offset of the tensor's first byte */
    char name[512]; /* the file, for messages                 */
} io_ctx;

/* Moves `count` elements between ptr and the tensor's elements
 * [elem_off, elem_off + count) of its row-major 2-D view. */
static int run_bytes(io_ctx *c, uint64_t off, void *ptr, size_t bytes) {
    int err = 0;
    int rc = c->writing ? pwrite_all(c->fd, ptr, bytes, off, &err) : pread_all(c->fd, ptr, bytes, off, &err);
    if (rc != 0) {
        tri_error("%s: tensor %s: %s of %zu bytes at offset %" PRIu64 ": %s", c->name, c->e->name,
                  c->writing ? "write" : "read", bytes, off, err ? strerror(err) : "unexpected end of file");
        return -1;
    }
    return 0;
}

/* 16-bit elements converted per pass, through a stack buffer */
#define HALF_CHUNK 4096

static int run(io_ctx *c, size_t elem_off, float *ptr, size_t count) {
    if (count == 0) return 0;
    const tri_dtype t = c->e->dtype;
    const size_t esz = tri_dtype_size(t);
    uint64_t off = c->base + (uint64_t)elem_off * esz;
    if (t == TRI_F32) return run_bytes(c, off, ptr, count * ELEM);
    /* BF16 / F16 in the file, fp32 in memory: rounded to nearest even when
     * written (exact for values of the type), widened exactly when read */
    uint16_t h[HALF_CHUNK];
    for (size_t i0 = 0; i0 < count; i0 += HALF_CHUNK) {
        size_t n = count - i0 < HALF_CHUNK ? count - i0 : HALF_CHUNK;
        if (c->writing)
            for (size_t i = 0; i < n; i++)
                h[i] = t == TRI_BF16 ? tri_f32_to_bf16(ptr[i0 + i]) : tri_f32_to_f16(ptr[i0 + i]);
        if (run_bytes(c, off + (uint64_t)i0 * esz, h, n * esz) != 0) return -1;
        if (!c->writing)
            for (size_t i = 0; i < n; i++) ptr[i0 + i] = t == TRI_BF16 ? tri_bf16_to_f32(h[i]) : tri_f16_to_f32(h[i]);
    }
    return 0;
}

static int prepare(io_ctx *c, int fd, const tri_st_layout *L, int entry, const tri_st_piece *p, int writing) {
    c->fd = fd;
    c->writing = writing;
    fd_name(fd, c->name, sizeof c->name);
    if (!L || !p || entry < 0 || (size_t)entry >= L->n) {
        tri_error("%s: tensor index %d out of range (layout has %zu)", c->name, entry, L ? L->n : (size_t)0);
        return -1;
    }
    const tri_st_entry *e = &L->entries[entry];
    c->e = e;
    if (p->r0 > e->rows || p->nr > e->rows - p->r0 || p->c0 > e->cols || p->nc > e->cols - p->c0) {
        tri_error("%s: tensor %s [%zu, %zu]: piece rows [%zu, +%zu) cols [%zu, +%zu) "
                  "out of range",
                  c->name, e->name, e->rows, e->cols, p->r0, p->nr, p->c0, p->nc);
        return -1;
    }
    if (p->nr == 0 || p->nc == 0) return 1; /* nothing to move */
    size_t need = p->transposed ? p->nr : p->nc;
    if (!p->buf || p->ld < need) {
        tri_error("%s: tensor %s: piece buffer %s (ld %zu, need >= %zu)", c->name, e->name,
                  p->buf ? "too narrow" : "is NULL", p->ld, need);
        return -1;
    }
    /* The data section is the file's tail, L->data_bytes long: its start
     * follows from the file's length (writers may hold a write-only fd).
     * When the fd is readable, the header's own length field must agree. */
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tri_error("%s: tensor %s: stat: %s", c->name, e->name, strerror(errno));
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    if (size < 8 + 2 + L->data_bytes || size - 8 - L->data_bytes > TRI_ST_MAX_HEADER) {
        tri_error("%s: tensor %s: file is %" PRIu64 " bytes, which cannot hold a header "
                  "and the layout's %" PRIu64 " data bytes (made with another layout?)",
                  c->name, e->name, size, L->data_bytes);
        return -1;
    }
    uint64_t n = size - 8 - L->data_bytes;
    unsigned char b8[8];
    int err = 0;
    if (pread_all(fd, b8, 8, 0, &err) == 0) {
        if (get_le64(b8) != n) {
            tri_error("%s: tensor %s: header length %" PRIu64 " and the layout's %" PRIu64 " data bytes need %" PRIu64
                      " bytes, the file has %" PRIu64 " (made with another layout?)",
                      c->name, e->name, get_le64(b8), L->data_bytes, 8 + get_le64(b8) + L->data_bytes, size);
            return -1;
        }
    } else if (err != EBADF) {
        tri_error("%s: tensor %s: reading the header length: %s", c->name, e->name,
                  err ? strerror(err) : "unexpected end of file");
        return -1;
    }
    c->base = 8 + n + e->begin;
    return 0;
}

/* stage[ii*mm + jj] = src[jj*ld + ii]   (stage: kk x mm, src: mm x ld) */
static void gather_t(float *stage, size_t kk, size_t mm, const float *src, size_t ld) {
    const size_t B = 32;
    for (size_t i0 = 0; i0 < kk; i0 += B)
        for (size_t j0 = 0; j0 < mm; j0 += B) {
            size_t ie = i0 + B < kk ? i0 + B : kk, je = j0 + B < mm ? j0 + B : mm;
            for (size_t jj = j0; jj < je; jj++)
                for (size_t ii = i0; ii < ie; ii++) stage[ii * mm + jj] = src[jj * ld + ii];
        }
}

/* dst[jj*ld + ii] = stage[ii*mm + jj] */
static void scatter_t(float *dst, size_t ld, const float *stage, size_t kk, size_t mm) {
    const size_t B = 32;
    for (size_t i0 = 0; i0 < kk; i0 += B)
        for (size_t j0 = 0; j0 < mm; j0 += B) {
            size_t ie = i0 + B < kk ? i0 + B : kk, je = j0 + B < mm ? j0 + B : mm;
            for (size_t jj = j0; jj < je; jj++)
                for (size_t ii = i0; ii < ie; ii++) dst[jj * ld + ii] = stage[ii * mm + jj];
        }
}

static int do_piece(int fd, const tri_st_layout *L, int entry, const tri_st_piece *p, int writing) {
    io_ctx c;
    int prc = prepare(&c, fd, L, entry, p, writing);
    if (prc != 0) return prc > 0 ? 0 : -1;
    const tri_st_entry *e = c.e;
    const size_t cols = e->cols, nr = p->nr, nc = p->nc, ld = p->ld;
    const size_t stage_elems = TRI_ST_STAGE_BYTES / ELEM;
    float *buf = p->buf;

    if (!p->transposed) {
        if (nc == cols && (ld == nc || nr == 1)) /* one contiguous run */
            return run(&c, p->r0 * cols, buf, nr * nc);
        if (nc == cols && nc <= stage_elems) { /* contiguous in the file: stage rows */
            size_t k = stage_elems / nc;
            if (k > nr) k = nr;
            float *stage = malloc(k * nc * ELEM);
            if (!stage) {
                tri_error("%s: tensor %s: out of memory (staging)", c.name, e->name);
                return -1;
            }
            int rc = 0;
            for (size_t i0 = 0; i0 < nr && rc == 0; i0 += k) {
                size_t kk = nr - i0 < k ? nr - i0 : k;
                if (writing)
                    for (size_t i = 0; i < kk; i++) memcpy(stage + i * nc, buf + (i0 + i) * ld, nc * ELEM);
                rc = run(&c, (p->r0 + i0) * cols, stage, kk * nc);
                if (rc == 0 && !writing)
                    for (size_t i = 0; i < kk; i++) memcpy(buf + (i0 + i) * ld, stage + i * nc, nc * ELEM);
            }
            free(stage);
            return rc;
        }
        for (size_t i = 0; i < nr; i++) /* a column range: one run per row */
            if (run(&c, (p->r0 + i) * cols + p->c0, buf + i * ld, nc) != 0) return -1;
        return 0;
    }

    /* Transposed: tiles of kk file rows x mm file columns through the stage. */
    size_t m = nc < stage_elems ? nc : stage_elems;
    size_t k = stage_elems / m;
    if (k > nr) k = nr;
    float *stage = malloc(k * m * ELEM);
    if (!stage) {
        tri_error("%s: tensor %s: out of memory (staging)", c.name, e->name);
        return -1;
    }
    int rc = 0;
    for (size_t i0 = 0; i0 < nr && rc == 0; i0 += k) {
        size_t kk = nr - i0 < k ? nr - i0 : k;
        for (size_t j0 = 0; j0 < nc && rc == 0; j0 += m) {
            size_t mm = nc - j0 < m ? nc - j0 : m;
            float *src = buf + j0 * ld + i0; /* box (i0, j0) */
            if (writing) gather_t(stage, kk, mm, src, ld);
            if (mm == cols) { /* whole file rows: one run for the tile */
                rc = run(&c, (p->r0 + i0) * cols, stage, kk * mm);
            } else {
                for (size_t ii = 0; ii < kk && rc == 0; ii++)
                    rc = run(&c, (p->r0 + i0 + ii) * cols + p->c0 + j0, stage + ii * mm, mm);
            }
            if (rc == 0 && !writing) scatter_t(src, ld, stage, kk, mm);
        }
    }
    free(stage);
    return rc;
}

int tri_st_write_piece(int fd, const tri_st_layout *L, int entry, const tri_st_piece *p) {
    return do_piece(fd, L, entry, p, 1);
}

int tri_st_read_piece(int fd, const tri_st_layout *L, int entry, const tri_st_piece *p) {
    return do_piece(fd, L, entry, p, 0);
}

/* ---------------------------------------------------------------- reading */

/* A JSON number that is an exact non-negative integer below 2^53. */
static int json_uint(const cJSON *it, uint64_t *v) {
    if (!cJSON_IsNumber(it)) return -1;
    double d = it->valuedouble;
    if (!(d >= 0.0) || d > 9007199254740992.0 || d != (double)(uint64_t)d) return -1;
    *v = (uint64_t)d;
    return 0;
}

static int cmp_begin(const void *a, const void *b) {
    const tri_st_entry *x = *(const tri_st_entry *const *)a, *y = *(const tri_st_entry *const *)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : 0;
}

/* Parses one tensor item of the header into f->layout. */
static int parse_tensor(tri_st_file *f, const cJSON *it, uint64_t data_len) {
    const char *path = f->path, *name = it->string;
    char sh[256];
    if (!cJSON_IsObject(it)) {
        tri_error("%s: tensor %s: expected an object", path, name);
        return -1;
    }
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *shp = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *offs = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt)) {
        tri_error("%s: tensor %s: missing \"dtype\" string", path, name);
        return -1;
    }
    tri_dtype dtype = TRI_F32;
    if (strcmp(dt->valuestring, "BF16") == 0)
        dtype = TRI_BF16;
    else if (strcmp(dt->valuestring, "F16") == 0)
        dtype = TRI_F16;
    else if (strcmp(dt->valuestring, "F32") != 0) {
        tri_error("%s: tensor %s has dtype %s; only F32, BF16 and F16 are supported", path, name, dt->valuestring);
        return -1;
    }
    int ndim = cJSON_IsArray(shp) ? cJSON_GetArraySize(shp) : -1;
    size_t shape[TRI_ST_MAX_DIM];
    int ok = ndim >= 0 && ndim <= TRI_ST_MAX_DIM;
    for (int d = 0; ok && d < ndim; d++) {
        uint64_t v;
        ok = json_uint(cJSON_GetArrayItem(shp, d), &v) == 0 && v <= SIZE_MAX;
        if (ok) shape[d] = (size_t)v;
    }
    if (!ok) {
        tri_error("%s: tensor %s: \"shape\" must be an array of at most %d "
                  "non-negative integers",
                  path, name, TRI_ST_MAX_DIM);
        return -1;
    }
    uint64_t begin, end;
    if (!cJSON_IsArray(offs) || cJSON_GetArraySize(offs) != 2 || json_uint(cJSON_GetArrayItem(offs, 0), &begin) != 0 ||
        json_uint(cJSON_GetArrayItem(offs, 1), &end) != 0 || begin > end) {
        tri_error("%s: tensor %s: \"data_offsets\" must be [begin, end] with "
                  "0 <= begin <= end",
                  path, name);
        return -1;
    }
    size_t rows, cols;
    uint64_t bytes;
    if (shape_bytes(ndim, shape, tri_dtype_size(dtype), &rows, &cols, &bytes) != 0) {
        tri_error("%s: tensor %s: shape %s is too large", path, name, fmt_shape(sh, sizeof sh, ndim, shape));
        return -1;
    }
    if (end - begin != bytes) {
        tri_error("%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                  " bytes, but %s shape %s needs %" PRIu64,
                  path, name, begin, end, end - begin, dt->valuestring, fmt_shape(sh, sizeof sh, ndim, shape), bytes);
        return -1;
    }
    if (end > data_len) {
        tri_error("%s: tensor %s: data_offsets [%" PRIu64 ", %" PRIu64
                  "] run past the end of the data section (%" PRIu64 " bytes; file truncated?)",
                  path, name, begin, end, data_len);
        return -1;
    }
    if (tri_st_layout_find(&f->layout, name) >= 0) {
        tri_error("%s: tensor %s appears twice in the header", path, name);
        return -1;
    }
    return push_entry(&f->layout, name, dtype, ndim, shape, rows, cols, begin, end) < 0 ? -1 : 0;
}

static int parse_header(tri_st_file *f, const char *hdr, size_t n, uint64_t data_len) {
    const char *path = f->path, *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(hdr, n, &end, 0);
    if (!root) {
        tri_error("%s: header is not valid JSON (error at byte %td of %zu)", path, end ? end - hdr : (ptrdiff_t)0, n);
        return -1;
    }
    for (const char *q = end; q < hdr + n; q++) {
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            tri_error("%s: unexpected bytes after the header JSON (at byte %td)", path, q - hdr);
            cJSON_Delete(root);
            return -1;
        }
    }
    if (!cJSON_IsObject(root)) {
        tri_error("%s: header is not a JSON object", path);
        cJSON_Delete(root);
        return -1;
    }
    int rc = 0;
    for (cJSON *it = root->child; it && rc == 0; it = it->next) {
        if (strcmp(it->string, METADATA_KEY) == 0) {
            if (f->metadata || !cJSON_IsObject(it)) {
                tri_error("%s: \"" METADATA_KEY "\" must be one object", path);
                rc = -1;
                break;
            }
            for (cJSON *m = it->child; m; m = m->next)
                if (!cJSON_IsString(m)) {
                    tri_error("%s: " METADATA_KEY ".%s: expected a string value", path, m->string);
                    rc = -1;
                    break;
                }
            if (rc == 0) f->metadata = cJSON_Duplicate(it, 1);
            if (rc == 0 && !f->metadata) {
                tri_error("%s: out of memory (metadata)", path);
                rc = -1;
            }
            continue;
        }
        rc = parse_tensor(f, it, data_len);
    }
    cJSON_Delete(root);
    if (rc != 0) return -1;

    /* No two tensors may share bytes; no bytes may follow the last tensor. */
    tri_st_layout *L = &f->layout;
    uint64_t max_end = 0;
    if (L->n > 0) {
        const tri_st_entry **ord = malloc(L->n * sizeof *ord);
        if (!ord) {
            tri_error("%s: out of memory", path);
            return -1;
        }
        for (size_t i = 0; i < L->n; i++) ord[i] = &L->entries[i];
        qsort(ord, L->n, sizeof *ord, cmp_begin);
        const tri_st_entry *prev = NULL;
        for (size_t i = 0; i < L->n; i++) {
            const tri_st_entry *e = ord[i];
            if (e->end == e->begin) continue;
            if (prev && e->begin < prev->end) {
                tri_error("%s: tensors %s [%" PRIu64 ", %" PRIu64 ") and %s [%" PRIu64 ", %" PRIu64 ") overlap", path,
                          prev->name, prev->begin, prev->end, e->name, e->begin, e->end);
                free(ord);
                return -1;
            }
            prev = e;
            if (e->end > max_end) max_end = e->end;
        }
        free(ord);
    }
    if (max_end != data_len) {
        tri_error("%s: %" PRIu64 " bytes after the last tensor's data (data section is %" PRIu64
                  " bytes, tensors end at %" PRIu64 ")",
                  path, data_len - max_end, data_len, max_end);
        return -1;
    }
    L->data_bytes = data_len;
    return 0;
}

int tri_st_open(tri_st_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = strdup(path);
    if (!f->path) {
        tri_error("%s: out of memory", path);
        return -1;
    }
    /* regular files only: a named pipe is refused, never blocked on */
    int fd = tri_open_regular(path, "safetensors file", NULL);
    if (fd < 0) {
        tri_st_close(f);
        return -1;
    }
    f->fd = fd;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        tri_error("%s: stat: %s", path, strerror(errno));
        tri_st_close(f);
        return -1;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char b8[8];
    int err = 0;
    if (size < 8 || pread_all(fd, b8, 8, 0, &err) != 0) {
        tri_error("%s: file is %" PRIu64 " bytes, too short for a safetensors "
                  "header%s%s",
                  path, size, err ? ": " : "", err ? strerror(err) : "");
        tri_st_close(f);
        return -1;
    }
    uint64_t n = get_le64(b8);
    if (n < 2 || n > TRI_ST_MAX_HEADER || n > size - 8) {
        tri_error("%s: header length %" PRIu64 " is impossible (file is %" PRIu64 " bytes, limit %" PRIu64
                  "): not a safetensors file, or truncated",
                  path, n, size, TRI_ST_MAX_HEADER);
        tri_st_close(f);
        return -1;
    }
    char *hdr = malloc((size_t)n + 1);
    if (!hdr) {
        tri_error("%s: out of memory (header of %" PRIu64 " bytes)", path, n);
        tri_st_close(f);
        return -1;
    }
    if (pread_all(fd, hdr, (size_t)n, 8, &err) != 0) {
        tri_error("%s: reading the header: %s", path, err ? strerror(err) : "unexpected end of file");
        free(hdr);
        tri_st_close(f);
        return -1;
    }
    hdr[n] = '\0';
    f->header_len = n;
    int rc = parse_header(f, hdr, (size_t)n, size - 8 - n);
    free(hdr);
    if (rc != 0) {
        tri_st_close(f);
        return -1;
    }
    return 0;
}

void tri_st_close(tri_st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd); /* read-only: nothing to lose */
    free(f->path);
    tri_st_layout_free(&f->layout);
    cJSON_Delete(f->metadata);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

const char *tri_st_get_metadata(const tri_st_file *f, const char *key) {
    if (!f || !f->metadata || !key) return NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(f->metadata, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int tri_st_expect(const tri_st_file *f, const char *name, int ndim, const size_t *shape) {
    int idx = tri_st_layout_find(&f->layout, name);
    char want[256], got[256];
    fmt_shape(want, sizeof want, ndim, shape);
    if (idx < 0) {
        tri_error("%s: no tensor %s (expected shape %s)", f->path, name, want);
        return -1;
    }
    const tri_st_entry *e = &f->layout.entries[idx];
    int same = e->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = e->shape[d] == shape[d];
    if (!same) {
        tri_error("%s: tensor %s has shape %s, expected %s", f->path, name,
                  fmt_shape(got, sizeof got, e->ndim, e->shape), want);
        return -1;
    }
    return idx;
}
