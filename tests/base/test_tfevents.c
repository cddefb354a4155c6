/* src/base/tfevents: the bytes of an event file against the format's
 * definition: Events assembled by hand from the protobuf wire format, the
 * record framing and both masked CRCs checked by an independent reader
 * (tests/helpers/tfevents_read.c: bitwise CRC-32C, its own decoder); the
 * file's name, and a second file of the same second beside the first.
 * TensorBoard's own reader reads what `trident train` writes in the CTest
 * tensorboard_reader (tests/scripts/test_tensorboard.py). */
#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/crc32c.h"
#include "base/tfevents.h"
#include "helpers/testutil.h"
#include "helpers/tfevents_read.h"

static unsigned char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "%s", path);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)len + 1);
    cr_assert_eq(fread(p, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return p;
}

static uint64_t le(const unsigned char *p, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

Test(tfevents, masked_crc_matches_an_independent_computation) {
    /* the reference's own anchor: the CRC catalogue's check value through the bitwise CRC */
    uint32_t c = 0xe3069283u;
    uint32_t want = (uint32_t)(((c >> 15) | (c << 17)) + 0xa282ead8u);
    cr_assert_eq(tt_tb_masked_crc("123456789", 9), want);
    cr_assert_eq(tri_tfevents_masked_crc("123456789", 9), want);
    /* the empty string: CRC 0, mask of 0 is the constant */
    cr_assert_eq(tri_tfevents_masked_crc("", 0), 0xa282ead8u);
    unsigned char buf[300];
    for (size_t n = 0; n < sizeof buf; n++) {
        buf[n] = (unsigned char)(n * 7 + 3);
        cr_assert_eq(tri_tfevents_masked_crc(buf, n), tt_tb_masked_crc(buf, n), "n = %zu", n);
    }
}

Test(tfevents, frame_is_length_crc_data_crc) {
    const char data[] = "hello, record";
    size_t n = strlen(data);
    unsigned char out[64];
    memset(out, 0xcc, sizeof out);
    tri_tfevents_frame(out, data, n);
    cr_assert_eq(le(out, 8), n);
    cr_assert_eq(le(out + 8, 4), tt_tb_masked_crc(out, 8));
    cr_assert_eq(memcmp(out + 12, data, n), 0);
    cr_assert_eq(le(out + 12 + n, 4), tt_tb_masked_crc(data, n));
    cr_assert_eq(out[16 + n], 0xcc, "wrote past n + 16 bytes");
    /* an empty record: 8 zero bytes of length */
    tri_tfevents_frame(out, NULL, 0);
    static const unsigned char zero[8];
    cr_assert_eq(memcmp(out, zero, 8), 0);
    cr_assert_eq(le(out + 8, 4), tt_tb_masked_crc(zero, 8));
    cr_assert_eq(le(out + 12, 4), 0xa282ead8u);
}

/* The file's bytes against Events written out by hand from the wire format:
 * key = field << 3 | wire type (0 varint, 1 fixed64, 2 length-delimited,
 * 5 fixed32), little-endian fixed values. */
Test(tfevents, bytes_are_the_protobuf_wire_format) {
    char *dir = tt_mkdtemp();
    tri_tfevents w;
    cr_assert_eq(tri_tfevents_open(&w, dir, 1.5), 0);
    const char *tag[] = {"a"};
    const float val[] = {0.5f};
    cr_assert_eq(tri_tfevents_scalars(&w, 2.0, 300, tag, val, 1), 0);
    cr_assert_eq(tri_tfevents_session_start(&w, 4.0, 5), 0);
    char path[1400];
    snprintf(path, sizeof path, "%s", w.path);
    cr_assert_eq(tri_tfevents_close(&w), 0);
    cr_assert_null(w.f);

    /* Event{wall_time 1.5, file_version "brain.Event:2"} */
    static const unsigned char ev0[] = {0x09, 0,   0,   0,   0,   0,   0,   0xf8, 0x3f, 0x1a, 13,  'b',
                                        'r',  'a', 'i', 'n', '.', 'E', 'v', 'e',  'n',  't',  ':', '2'};
    /* Event{wall_time 2.0, step 300 (varint ac 02), summary{value{tag "a", simple_value 0.5f}}} */
    static const unsigned char ev1[] = {0x09, 0,  0,    0, 0,    0, 0,   0,    0x40, 0x10, 0xac, 0x02,
                                        0x2a, 10, 0x0a, 8, 0x0a, 1, 'a', 0x15, 0,    0,    0,    0x3f};
    /* Event{wall_time 4.0, step 5, session_log (field 7){status START (1)}} */
    static const unsigned char ev2[] = {0x09, 0, 0, 0, 0, 0, 0, 0x10, 0x40, 0x10, 5, 0x3a, 2, 0x08, 1};
    const unsigned char *want[] = {ev0, ev1, ev2};
    size_t wn[] = {sizeof ev0, sizeof ev1, sizeof ev2};
    size_t n;
    unsigned char *got = slurp(path, &n);
    size_t off = 0;
    for (int r = 0; r < 3; r++) {
        cr_assert_leq(off + 16 + wn[r], n, "record %d missing", r);
        cr_assert_eq(le(got + off, 8), wn[r], "record %d: length", r);
        cr_assert_eq(le(got + off + 8, 4), tt_tb_masked_crc(got + off, 8), "record %d: length CRC", r);
        cr_assert_eq(memcmp(got + off + 12, want[r], wn[r]), 0, "record %d: Event bytes", r);
        cr_assert_eq(le(got + off + 12 + wn[r], 4), tt_tb_masked_crc(want[r], wn[r]), "record %d: data CRC", r);
        off += 16 + wn[r];
    }
    cr_assert_eq(off, n, "trailing bytes");
    free(got);
    tt_rmrf(dir);
    free(dir);
}

Test(tfevents, scalars_read_back_through_an_independent_reader) {
    char *dir = tt_mkdtemp();
    tri_tfevents w;
    cr_assert_eq(tri_tfevents_open(&w, dir, 1795796417.25), 0);
    /* tags of 1 to 200 bytes (two-byte length varints), steps up to 2^40 and
     * a negative one (a ten-byte varint), values of every kind a float has */
    char long_tag[201];
    memset(long_tag, 'x', 200);
    long_tag[200] = '\0';
    const char *tags[] = {"train/loss", "val/loss", long_tag, "t", "perf/mfu"};
    const float vals[] = {5.5194864f, -0.0f, 3.4e38f, INFINITY, 1e-40f};
    const int64_t steps[] = {1, 2, 1000000, (int64_t)1 << 40, -3};
    for (int s = 0; s < 5; s++) {
        float v[5];
        for (int i = 0; i < 5; i++) v[i] = vals[i] * (float)(s + 1);
        cr_assert_eq(tri_tfevents_scalars(&w, 1795796418.0 + s, steps[s], tags, v, 5), 0);
    }
    cr_assert_eq(tri_tfevents_scalars(&w, 1795796430.0, 7, tags, vals, 0), 0); /* an empty summary */
    const char *nan_tag[] = {"nan"};
    const float nan_val[] = {NAN};
    cr_assert_eq(tri_tfevents_scalars(&w, 1795796431.0, 8, nan_tag, nan_val, 1), 0);
    char path[1400];
    snprintf(path, sizeof path, "%s", w.path);
    cr_assert_eq(tri_tfevents_close(&w), 0);

    tt_tb_file f;
    cr_assert_eq(tt_tb_read(path, &f), 0, "%s", f.why);
    cr_assert_eq(f.records, 1 + 5 + 1 + 1);
    cr_assert_str_eq(f.file_version, "brain.Event:2");
    cr_assert_eq(f.first_wall_time, 1795796417.25);
    cr_assert_eq(f.n_scalars, 5 * 5 + 1);
    for (int s = 0; s < 5; s++)
        for (int i = 0; i < 5; i++) {
            const tt_tb_scalar *g = &f.scalars[5 * s + i];
            float want = vals[i] * (float)(s + 1);
            cr_assert_eq(g->step, steps[s]);
            cr_assert_eq(g->wall_time, 1795796418.0 + s);
            cr_assert_str_eq(g->tag, tags[i]);
            cr_assert_eq(memcmp(&g->value, &want, 4), 0, "step %d tag %d: %g, want %g", s, i, g->value, want);
        }
    cr_assert(isnan(f.scalars[25].value));
    cr_assert_eq(f.scalars[25].step, 8);
    tt_tb_free(&f);
    tt_rmrf(dir);
    free(dir);
}

Test(tfevents, name_is_time_and_host_and_a_second_file_never_touches_the_first) {
    char *dir = tt_mkdtemp();
    char host[256];
    cr_assert_eq(gethostname(host, sizeof host), 0);
    tri_tfevents a, b;
    cr_assert_eq(tri_tfevents_open(&a, dir, 1795796417.9), 0);
    char want[1400];
    snprintf(want, sizeof want, "%s/events.out.tfevents.1795796417.%s", dir, host);
    cr_assert_str_eq(a.path, want);
    const char *tag[] = {"x"};
    const float v[] = {1.0f};
    cr_assert_eq(tri_tfevents_scalars(&a, 1795796418.0, 1, tag, v, 1), 0);
    /* flushed after each record: all of it is on disk before close (the Event of
     * one scalar: 9 bytes wall_time, 2 step, 2 + 10 summary{value{tag, value}}) */
    struct stat st;
    cr_assert_eq(stat(a.path, &st), 0);
    cr_assert_eq(st.st_size, (16 + 24) + (16 + 23));
    cr_assert_eq(tri_tfevents_open(&b, dir, 1795796417.1), 0);
    snprintf(want, sizeof want, "%s/events.out.tfevents.1795796417.%s.1", dir, host);
    cr_assert_str_eq(b.path, want);
    cr_assert_eq(stat(a.path, &st), 0);
    cr_assert_eq(st.st_size, (16 + 24) + (16 + 23), "the first file was changed");
    cr_assert_eq(tri_tfevents_close(&a), 0);
    cr_assert_eq(tri_tfevents_close(&b), 0);
    cr_assert_eq(tri_tfevents_close(NULL), 0);
    tt_rmrf(dir);
    free(dir);
}

Test(tfevents, a_missing_directory_is_an_error_naming_the_file) {
    char *dir = tt_mkdtemp();
    char missing[1100];
    snprintf(missing, sizeof missing, "%s/no/such/dir", dir);
    char err[2048];
    tt_err_capture(err, sizeof err);
    tri_tfevents w;
    int rc = tri_tfevents_open(&w, missing, 1795796417.0);
    tt_err_capture(NULL, 0);
    cr_assert_eq(rc, -1);
    cr_assert_null(w.f);
    cr_assert(strstr(err, "/no/such/dir/events.out.tfevents.1795796417.") != NULL, "%s", err);
    cr_assert(strstr(err, "No such file or directory") != NULL, "%s", err);
    tt_rmrf(dir);
    free(dir);
}
