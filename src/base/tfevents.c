/* TensorBoard event files (base/tfevents.h): the protobuf wire format by
 * hand. Wire types: 0 varint, 1 fixed 64 bits, 2 length-delimited, 5 fixed
 * 32 bits; a field starts with the varint (number << 3 | wire type). All
 * fixed-width values are little endian. */
#include "base/tfevents.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/err.h"

enum { WIRE_VARINT = 0, WIRE_FIXED64 = 1, WIRE_LEN = 2, WIRE_FIXED32 = 5 };

/* field numbers of event.proto and summary.proto */
enum {
    EVENT_WALL_TIME = 1,
    EVENT_STEP = 2,
    EVENT_FILE_VERSION = 3,
    EVENT_SUMMARY = 5,
    EVENT_SESSION_LOG = 7,
    SUMMARY_VALUE = 1,
    VALUE_TAG = 1,
    VALUE_SIMPLE_VALUE = 2,
    SESSION_LOG_STATUS = 1,
    SESSION_LOG_START = 1
};

/* A growing byte buffer; after a failed allocation it keeps failing (oom). */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    int oom;
} buf;

static void put(buf *b, const void *d, size_t n) {
    if (b->oom) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n) cap *= 2;
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}

static void put_varint(buf *b, uint64_t v) {
    uint8_t t[10];
    size_t k = 0;
    do {
        t[k] = (uint8_t)(v & 0x7f);
        v >>= 7;
        if (v) t[k] |= 0x80;
        k++;
    } while (v);
    put(b, t, k);
}

static void put_key(buf *b, unsigned field, unsigned wire) { put_varint(b, (uint64_t)field << 3 | wire); }

static void put_le(buf *b, uint64_t v, int bytes) {
    uint8_t t[8];
    for (int i = 0; i < bytes; i++) t[i] = (uint8_t)(v >> (8 * i));
    put(b, t, (size_t)bytes);
}

static void put_double(buf *b, unsigned field, double x) {
    uint64_t u;
    memcpy(&u, &x, 8);
    put_key(b, field, WIRE_FIXED64);
    put_le(b, u, 8);
}

static void put_float(buf *b, unsigned field, float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    put_key(b, field, WIRE_FIXED32);
    put_le(b, u, 4);
}

static void put_bytes(buf *b, unsigned field, const void *d, size_t n) {
    put_key(b, field, WIRE_LEN);
    put_varint(b, n);
    put(b, d, n);
}

/* wall_time and step, the head of every Event (int64 as its two's complement) */
static void put_event_head(buf *b, double wall_time, int64_t step) {
    put_double(b, EVENT_WALL_TIME, wall_time);
    put_key(b, EVENT_STEP, WIRE_VARINT);
    put_varint(b, (uint64_t)step);
}

uint32_t tri_tfevents_masked_crc(const void *data, size_t n) {
    uint32_t c = tri_crc32c(0, data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static void le(uint8_t *out, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) out[i] = (uint8_t)(v >> (8 * i));
}

void tri_tfevents_frame(uint8_t *out, const void *data, size_t n) {
    le(out, n, 8);
    le(out + 8, tri_tfevents_masked_crc(out, 8), 4);
    if (n) memcpy(out + 12, data, n);
    le(out + 12 + n, tri_tfevents_masked_crc(data, n), 4);
}

/* Frames b's bytes as one record, writes it with one fwrite and flushes. */
static int write_record(tri_tfevents *w, buf *b) {
    if (!w->f) {
        free(b->p);
        return tri_error("TensorBoard event file: write after close");
    }
    if (b->oom) {
        free(b->p);
        return tri_error("%s: out of memory for an event", w->path);
    }
    uint8_t *rec = malloc(b->n + 16);
    if (!rec) {
        free(b->p);
        return tri_error("%s: out of memory for an event", w->path);
    }
    tri_tfevents_frame(rec, b->p, b->n);
    int ok = fwrite(rec, 1, b->n + 16, w->f) == b->n + 16 && fflush(w->f) == 0;
    int e = errno;
    free(rec);
    free(b->p);
    if (!ok) return tri_error("%s: cannot write: %s", w->path, strerror(e));
    return 0;
}

int tri_tfevents_open(tri_tfevents *w, const char *dir, double wall_time) {
    memset(w, 0, sizeof *w);
    char host[256];
    if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *p = host; *p; p++)
        if (*p == '/') *p = '_';
    long long secs = (long long)wall_time; /* (after 1970: the floor) */
    int fd = -1;
    for (int k = 0; k < 100 && fd < 0; k++) {
        int len = k == 0 ? snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s", dir, secs, host)
                         : snprintf(w->path, sizeof w->path, "%s/events.out.tfevents.%lld.%s.%d", dir, secs, host, k);
        if (len < 0 || (size_t)len >= sizeof w->path)
            return tri_error("%s: directory name too long for a TensorBoard event file", dir);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
        if (fd < 0 && errno != EEXIST) return tri_error("%s: cannot create: %s", w->path, strerror(errno));
    }
    if (fd < 0) return tri_error("%s: cannot create: 100 event files of this second and host exist", w->path);
    w->f = fdopen(fd, "wb");
    if (!w->f) {
        int e = errno;
        close(fd);
        return tri_error("%s: cannot open: %s", w->path, strerror(e));
    }
    buf b = {0};
    put_double(&b, EVENT_WALL_TIME, wall_time);
    put_bytes(&b, EVENT_FILE_VERSION, TRI_TFEVENTS_VERSION, strlen(TRI_TFEVENTS_VERSION));
    if (write_record(w, &b) != 0) {
        fclose(w->f);
        w->f = NULL;
        return -1;
    }
    return 0;
}

int tri_tfevents_scalars(tri_tfevents *w, double wall_time, int64_t step, const char *const *tags, const float *values,
                         size_t n) {
    buf summary = {0}, value = {0}, ev = {0};
    for (size_t i = 0; i < n; i++) {
        value.n = 0;
        put_bytes(&value, VALUE_TAG, tags[i], strlen(tags[i]));
        put_float(&value, VALUE_SIMPLE_VALUE, values[i]);
        put_bytes(&summary, SUMMARY_VALUE, value.p, value.n);
        summary.oom |= value.oom;
    }
    put_event_head(&ev, wall_time, step);
    put_bytes(&ev, EVENT_SUMMARY, summary.p, summary.n);
    ev.oom |= summary.oom;
    free(value.p);
    free(summary.p);
    return write_record(w, &ev);
}

int tri_tfevents_session_start(tri_tfevents *w, double wall_time, int64_t step) {
    buf log = {0}, ev = {0};
    put_key(&log, SESSION_LOG_STATUS, WIRE_VARINT);
    put_varint(&log, SESSION_LOG_START);
    put_event_head(&ev, wall_time, step);
    put_bytes(&ev, EVENT_SESSION_LOG, log.p, log.n);
    ev.oom |= log.oom;
    free(log.p);
    return write_record(w, &ev);
}

int tri_tfevents_close(tri_tfevents *w) {
    if (!w || !w->f) return 0;
    int rc = 0;
    if (fclose(w->f) != 0) rc = tri_error("%s: cannot close: %s", w->path, strerror(errno));
    memset(w, 0, sizeof *w);
    return rc;
}
