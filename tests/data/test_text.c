/* data/text: the input check, and blocks that end where they should (after
 * a line, or at a safe pre-token cut) and together give back the file,
 * plain or through xz. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/text.h"
#include "data/tok/tokenizer.h"
#include "helpers/testutil.h"

static char *g_dir;

static void setup(void) { g_dir = tt_mkdtemp(); }
static void teardown(void) {
    tt_rmrf(g_dir);
    free(g_dir);
}

static const char *in_dir(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* n bytes of short lines of words (no line longer than 80 bytes). */
static char *lines_of(size_t n) {
    char *t = malloc(n + 1);
    cr_assert_not_null(t);
    uint64_t s = 12345;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        unsigned r = (unsigned)(s >> 59);
        t[i] = i % 61 == 60 ? '\n' : r < 5 ? ' ' : (char)('a' + r % 26);
    }
    t[n] = 0;
    return t;
}

Test(text, check_totals_plain_files_and_refuses_what_cannot_be_read, .init = setup, .fini = teardown) {
    char a[4200], b[4200], x[4200], d[4200];
    write_file(in_dir(a, sizeof a, "a.txt"), "hello\n", 6);
    write_file(in_dir(b, sizeof b, "b.txt"), "abc", 3);
    write_file(in_dir(x, sizeof x, "c.txt.xz"), "not really xz", 13);
    const char *two[] = {a, b};
    uint64_t total = 7;
    cr_assert_eq(tri_text_check(two, 2, &total), 0);
    cr_assert_eq(total, 9u);
    const char *with_xz[] = {a, x};
    cr_assert_eq(tri_text_check(with_xz, 2, &total), 0);
    cr_assert_eq(total, 0u, "the text size of an .xz file is unknown");
    tt_capture c;
    char errp[4300];
    snprintf(errp, sizeof errp, "%s/err", g_dir);
    tt_capture_begin(&c, errp);
    const char *missing[] = {a, "/nonexistent/x.txt"};
    int rc1 = tri_text_check(missing, 2, &total);
    const char *dir[] = {in_dir(d, sizeof d, "")};
    int rc2 = tri_text_check(dir, 1, &total);
    char *err = tt_capture_end(&c);
    cr_assert_eq(rc1, -1);
    cr_assert_eq(rc2, -1);
    /* the reason is the errno's (issue 22: was "no such file or no permission" whatever it was) */
    cr_assert(strstr(err, "trident: /nonexistent/x.txt: cannot read: No such file or directory\n") != NULL, "%s", err);
    cr_assert(strstr(err, ": not a regular file\n") != NULL, "%s", err);
    free(err);
}

/* Reads path in blocks; checks each block's end and that they add up. */
static void check_blocks(const char *path, const char *want, size_t n, int by_line) {
    tri_textblocks tb;
    cr_assert_eq(tri_textblocks_open(&tb, path, 4096, by_line), 0);
    size_t at = 0, blocks = 0;
    const char *text;
    size_t len;
    int r;
    while ((r = tri_textblocks_next(&tb, &text, &len)) == 1) {
        cr_assert_leq(at + len, n);
        cr_assert_eq(memcmp(text, want + at, len), 0, "block %zu", blocks);
        at += len;
        blocks++;
        if (at == n) continue; /* the last block ends at the end of the file */
        if (by_line)
            cr_assert_eq(text[len - 1], '\n', "block %zu ends inside a line", blocks);
        else
            cr_assert_eq(tri_tokenizer_cut_before(want, n, at), at, "block %zu does not end at a cut", blocks);
    }
    cr_assert_eq(r, 0);
    cr_assert_eq(at, n);
    cr_assert_gt(blocks, 10u);
    cr_assert_eq(tb.bytes_done, n);
    cr_assert_eq(tri_textblocks_close(&tb), 0);
}

Test(text, blocks_end_after_a_line_or_at_a_cut_and_add_up, .init = setup, .fini = teardown) {
    char p[4200], cmd[9000];
    size_t n = 100000;
    char *t = lines_of(n);
    write_file(in_dir(p, sizeof p, "t.txt"), t, n);
    check_blocks(p, t, n, 1);
    check_blocks(p, t, n, 0);
    snprintf(cmd, sizeof cmd, "xz -1 -k '%s' 2>/dev/null", p);
    if (system(cmd) != 0) {
        cr_log_warn("xz not available: skipping the .xz part");
    } else {
        strcat(p, ".xz");
        check_blocks(p, t, n, 1);
    }
    free(t);
}

Test(text, a_failing_xz_is_reported_at_close, .init = setup, .fini = teardown) {
    char p[4200], errp[4300];
    write_file(in_dir(p, sizeof p, "bad.txt.xz"), "not xz data at all", 18);
    snprintf(errp, sizeof errp, "%s/err", g_dir);
    tt_capture c;
    tt_capture_begin(&c, errp);
    tri_textfile tf;
    int opened = tri_textfile_open(&tf, p);
    char buf[64];
    if (opened == 0) tri_textfile_read(&tf, buf, sizeof buf);
    int rc = opened == 0 ? tri_textfile_close(&tf) : -1;
    char *err = tt_capture_end(&c);
    cr_assert_eq(rc, -1);
    cr_assert(strstr(err, "bad.txt.xz: ") != NULL, "%s", err);
    free(err);
}
