/* src/base/fs: mkdir -p and crash-safe whole-file writes. Checks look at the
 * file system itself (stat, readdir, contents). */
#include <criterion/criterion.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "helpers/testutil.h"
#include "base/file.h"
#include "base/fs.h"

/* every entry of dir except . and .., joined by ',' in readdir order (<= 1 expected) */
static void list_dir(const char *dir, char *out, size_t n) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d);
    out[0] = '\0';
    struct dirent *de;
    while ((de = readdir(d)))
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) {
            if (out[0]) strncat(out, ",", n - strlen(out) - 1);
            strncat(out, de->d_name, n - strlen(out) - 1);
        }
    closedir(d);
}

static void check_one_line(const char *msg, const char *must1, const char *must2) {
    cr_assert(strncmp(msg, "trident: ", 9) == 0, "[%s]", msg);
    const char *nl = strchr(msg, '\n');
    cr_assert(nl && nl[1] == '\0', "not one line: [%s]", msg);
    cr_assert_not_null(strstr(msg, must1), "[%s] does not name %s", msg, must1);
    if (must2) cr_assert_not_null(strstr(msg, must2), "[%s] does not name %s", msg, must2);
}

Test(fs, write_file_atomic_replaces_whole_files) {
    char *dir = tt_mkdtemp(), path[4200], ls[512];
    snprintf(path, sizeof path, "%s/state.json", dir);
    const char *texts[] = {"{\"step\": 1}", "{}", ""};
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tri_write_file_atomic(path, texts[i], strlen(texts[i])), 0);
        char *got = tt_read(path);
        cr_assert_str_eq(got, texts[i]);
        free(got);
    }
    list_dir(dir, ls, sizeof ls);
    cr_assert_str_eq(ls, "state.json", "no .tmp left beside it");

    /* content and length through the checked reader, NUL appended */
    char big[10000];
    for (size_t i = 0; i < sizeof big; i++) big[i] = (char)('a' + i % 26);
    cr_assert_eq(tri_write_file_atomic(path, big, sizeof big), 0);
    size_t n = 0;
    char *txt = tri_slurp(path, "test file", 0, &n);
    cr_assert_not_null(txt);
    cr_assert_eq(n, sizeof big);
    cr_assert_eq(memcmp(txt, big, n), 0);
    cr_assert_eq(txt[n], '\0');
    free(txt);

    char bad[4200], cap_path[4300];
    snprintf(bad, sizeof bad, "%s/no/such/dir/config.json", dir);
    snprintf(cap_path, sizeof cap_path, "%s.stderr", dir);
    tt_capture cap;
    tt_capture_begin(&cap, cap_path);
    int rc = tri_write_file_atomic(bad, "{}", 2);
    char *msg = tt_capture_end(&cap);
    cr_assert_eq(rc, -1);
    check_one_line(msg, bad, NULL);
    free(msg);
    tt_rmrf(dir);
    free(dir);
}

Test(fs, mkdir_p_names_the_file_in_the_way_and_the_key) {
    char *dir = tt_mkdtemp(), p[4200], cap_path[4300];
    snprintf(cap_path, sizeof cap_path, "%s.stderr", dir);
    snprintf(p, sizeof p, "%s/a/b/c//", dir);
    cr_assert_eq(tri_mkdir_p(p), 0);
    cr_assert_eq(tri_mkdir_p(p), 0, "an existing directory is fine");
    struct stat st;
    snprintf(p, sizeof p, "%s/a/b/c", dir);
    cr_assert(stat(p, &st) == 0 && S_ISDIR(st.st_mode));

    /* a path under a regular file */
    char afile[4200];
    snprintf(afile, sizeof afile, "%s/afile", dir);
    FILE *f = fopen(afile, "w");
    fclose(f);
    snprintf(p, sizeof p, "%s/afile/sub/deeper", dir);
    tt_capture cap;
    tt_capture_begin(&cap, cap_path);
    int rc = tri_mkdir_p_named("checkpoint.dir", p);
    char *msg = tt_capture_end(&cap);
    cr_assert_eq(rc, -1);
    check_one_line(msg, "checkpoint.dir", afile);
    cr_assert_not_null(strstr(msg, "is a file"), "%s", msg);
    free(msg);

    /* the path is the file itself */
    tt_capture_begin(&cap, cap_path);
    rc = tri_mkdir_p(afile);
    msg = tt_capture_end(&cap);
    cr_assert_eq(rc, -1);
    check_one_line(msg, afile, "not a directory");
    free(msg);

    /* empty */
    tt_capture_begin(&cap, cap_path);
    rc = tri_mkdir_p_named("checkpoint.dir", "");
    msg = tt_capture_end(&cap);
    cr_assert_eq(rc, -1);
    check_one_line(msg, "checkpoint.dir", "empty");
    free(msg);
    tt_rmrf(dir);
    free(dir);
}
