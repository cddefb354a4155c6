/* tests/helpers/tfevents_read.h: TFRecords and the Event protobuf, read back. */
#include "helpers/tfevents_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t crc32c_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

uint32_t tt_tb_masked_crc(const void *data, size_t n) {
    uint32_t c = crc32c_bitwise(data, n);
    uint64_t twice = (uint64_t)c << 32 | c; /* rotate right by 15 through 64 bits */
    return (uint32_t)(twice >> 15) + 0xa282ead8u;
}

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* A cursor over one message's bytes. */
typedef struct cur {
    const unsigned char *p, *end;
    int bad;
} cur;

static uint64_t varint(cur *c) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        if (c->p >= c->end) break;
        unsigned char b = *c->p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) return v;
    }
    c->bad = 1;
    return 0;
}

/* The next field: its number, wire type, and for wire type 2 a cursor over
 * its bytes, for 0 its value, for 1 and 5 its bits. Returns 0 at the end. */
static int field(cur *c, int *num, int *wire, uint64_t *val, cur *sub) {
    if (c->bad || c->p >= c->end) return 0;
    uint64_t key = varint(c);
    *num = (int)(key >> 3);
    *wire = (int)(key & 7);
    switch (*wire) {
    case 0: *val = varint(c); break;
    case 1:
    case 5: {
        size_t k = *wire == 1 ? 8 : 4;
        if ((size_t)(c->end - c->p) < k) return c->bad = 1, 0;
        *val = le(c->p, (int)k);
        c->p += k;
        break;
    }
    case 2: {
        uint64_t n = varint(c);
        if (c->bad || n > (uint64_t)(c->end - c->p)) return c->bad = 1, 0;
        sub->p = c->p;
        sub->end = c->p + n;
        sub->bad = 0;
        c->p += n;
        break;
    }
    default: return c->bad = 1, 0;
    }
    return !c->bad;
}

static int summary(tt_tb_file *f, cur *s, double wall, int64_t step) {
    int num, wire;
    uint64_t val;
    cur v;
    while (field(s, &num, &wire, &val, &v)) {
        if (num != 1 || wire != 2) continue; /* Summary.value = 1 */
        tt_tb_scalar sc = {.step = step, .wall_time = wall};
        int has_value = 0, n2, w2;
        uint64_t x;
        cur t;
        while (field(&v, &n2, &w2, &x, &t)) {
            if (n2 == 1 && w2 == 2) { /* tag */
                size_t len = (size_t)(t.end - t.p);
                if (len >= sizeof sc.tag) return snprintf(f->why, sizeof f->why, "tag of %zu bytes", len), -1;
                memcpy(sc.tag, t.p, len);
                sc.tag[len] = '\0';
            } else if (n2 == 2 && w2 == 5) { /* simple_value */
                uint32_t u = (uint32_t)x;
                memcpy(&sc.value, &u, 4);
                has_value = 1;
            }
        }
        if (v.bad) return snprintf(f->why, sizeof f->why, "malformed Summary.Value"), -1;
        if (!has_value) continue;
        tt_tb_scalar *g = realloc(f->scalars, (size_t)(f->n_scalars + 1) * sizeof *g);
        if (!g) return snprintf(f->why, sizeof f->why, "out of memory"), -1;
        f->scalars = g;
        f->scalars[f->n_scalars++] = sc;
    }
    if (s->bad) return snprintf(f->why, sizeof f->why, "malformed Summary"), -1;
    return 0;
}

static int event(tt_tb_file *f, const unsigned char *p, size_t n) {
    cur c = {p, p + n, 0}, sum = {0}, log = {0}, sub;
    int num, wire, has_sum = 0, has_log = 0;
    uint64_t val;
    double wall = 0;
    int64_t step = 0;
    while (field(&c, &num, &wire, &val, &sub)) {
        if (num == 1 && wire == 1)
            memcpy(&wall, &val, 8);
        else if (num == 2 && wire == 0)
            step = (int64_t)val;
        else if (num == 3 && wire == 2 && f->records == 1) {
            size_t len = (size_t)(sub.end - sub.p);
            if (len >= sizeof f->file_version) len = sizeof f->file_version - 1;
            memcpy(f->file_version, sub.p, len);
            f->file_version[len] = '\0';
        } else if (num == 5 && wire == 2)
            sum = sub, has_sum = 1;
        else if (num == 7 && wire == 2)
            log = sub, has_log = 1; /* session_log */
    }
    if (c.bad) return snprintf(f->why, sizeof f->why, "record %d: malformed Event", f->records), -1;
    if (f->records == 1) f->first_wall_time = wall;
    if (has_sum && summary(f, &sum, wall, step) != 0) return -1;
    if (has_log) {
        uint64_t status = 0;
        while (field(&log, &num, &wire, &val, &sub))
            if (num == 1 && wire == 0) status = val;
        if (status == 1 && f->n_starts < 16) f->start_steps[f->n_starts++] = step;
    }
    return 0;
}

int tt_tb_read(const char *path, tt_tb_file *f) {
    memset(f, 0, sizeof *f);
    FILE *in = fopen(path, "rb");
    if (!in) return snprintf(f->why, sizeof f->why, "%s: cannot open", path), -1;
    long off = 0;
    int rc = 0;
    for (;;) {
        unsigned char head[12], tail[4];
        size_t got = fread(head, 1, 12, in);
        if (got == 0) break;
        if (got < 12) {
            rc = -1, snprintf(f->why, sizeof f->why, "torn header at byte %ld", off);
            break;
        }
        uint64_t n = le(head, 8);
        if (le(head + 8, 4) != tt_tb_masked_crc(head, 8)) {
            rc = -1, snprintf(f->why, sizeof f->why, "length CRC wrong at byte %ld", off);
            break;
        }
        unsigned char *data = n < (1u << 24) ? malloc(n ? n : 1) : NULL;
        if (!data || fread(data, 1, n, in) != n || fread(tail, 1, 4, in) != 4) {
            free(data);
            rc = -1, snprintf(f->why, sizeof f->why, "torn record at byte %ld", off);
            break;
        }
        if (le(tail, 4) != tt_tb_masked_crc(data, n)) {
            free(data);
            rc = -1, snprintf(f->why, sizeof f->why, "data CRC wrong at byte %ld", off);
            break;
        }
        f->records++;
        rc = event(f, data, n);
        free(data);
        if (rc != 0) break;
        off += (long)n + 16;
    }
    fclose(in);
    return rc;
}

void tt_tb_free(tt_tb_file *f) {
    free(f->scalars);
    f->scalars = NULL;
    f->n_scalars = 0;
}
