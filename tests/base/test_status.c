/* base/status: the exact bytes a terminal and a log get, and the closing
 * summary with the program's prefix. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "helpers/testutil.h"

static char g_dir[4096];

static void capture(tt_capture *c) {
    char *d = tt_mkdtemp();
    snprintf(g_dir, sizeof g_dir, "%s", d);
    free(d);
    char path[4200];
    snprintf(path, sizeof path, "%s/stderr", g_dir);
    tt_capture_begin(c, path);
}

static char *release(tt_capture *c) {
    char *s = tt_capture_end(c);
    tt_rmrf(g_dir);
    return s;
}

Test(status, a_terminal_line_is_redrawn_in_place_and_ended) {
    tt_capture c;
    capture(&c);
    tri_status_line("tokenize: 1.0 MB", 1);
    tri_status_line("tokenize: 2.0 MB", 1);
    tri_status_end();
    char *s = release(&c);
    cr_assert_str_eq(s, "\rtokenize: 1.0 MB\033[K\rtokenize: 2.0 MB\033[K\n");
    free(s);
}

Test(status, a_log_gets_plain_lines) {
    tt_capture c;
    capture(&c);
    tri_status_line("tokenize: 1.0 MB", 0);
    tri_status_line("tokenize: 2.0 MB", 0);
    char *s = release(&c);
    cr_assert_str_eq(s, "tokenize: 1.0 MB\ntokenize: 2.0 MB\n");
    free(s);
}

Test(status, the_summary_has_the_programs_prefix) {
    tt_capture c;
    capture(&c);
    tri_status_done("tokenize encode: %d documents", 3);
    char *s = release(&c);
    cr_assert_str_eq(s, "trident: tokenize encode: 3 documents\n");
    free(s);
}

Test(status, stderr_into_a_file_is_not_a_terminal) {
    tt_capture c;
    capture(&c);
    int tty = tri_status_tty();
    free(release(&c));
    cr_assert_eq(tty, 0);
}
