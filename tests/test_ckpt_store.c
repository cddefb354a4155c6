/* model/ckpt_store: the checkpoint directory protocol. Every check looks at
 * the file system itself (readdir, stat, file contents), not through the
 * functions under test. */
#include <criterion/criterion.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/testutil.h"
#include "model/ckpt_store.h"
#include "src/base/fs.h"

static int rm_cb(const char *p, const struct stat *sb, int type, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    return (type == FTW_DP ? rmdir(p) : unlink(p)) == 0 ? 0 : -1;
}

static void make_dir(char *dir, size_t n)
{
    snprintf(dir, n, "/tmp/tri_ckpt_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void remove_dir(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

static void put_file(const char *dir, const char *name, const char *text)
{
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s: %s", p, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* The content of dir/name ("" if missing), in a static-free caller buffer. */
static const char *get_file(const char *dir, const char *name, char *buf, size_t n)
{
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    buf[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f)
        return buf;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
    return buf;
}

static int is_dir(const char *dir, const char *name)
{
    char p[2048];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The sorted names in dir joined by ',' (without . and ..). */
static void list_dir(const char *dir, char *out, size_t n)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
    char *names[64];
    size_t k = 0;
    struct dirent *de;
    while ((de = readdir(d)) && k < 64)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
            names[k++] = strdup(de->d_name);
    closedir(d);
    qsort(names, k, sizeof *names, cmp_str);
    out[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        if (i)
            strncat(out, ",", n - strlen(out) - 1);
        strncat(out, names[i], n - strlen(out) - 1);
        free(names[i]);
    }
}

/* root/latest holds "step_<8 digits>\n" naming an existing directory. */
static void check_latest(const char *root, const char *want)
{
    char buf[256], line[64];
    snprintf(line, sizeof line, "%s\n", want);
    cr_assert_str_eq(get_file(root, "latest", buf, sizeof buf), line);
    cr_assert(is_dir(root, want), "latest names %s, which is not a directory", want);
}

/* begin, write two files, commit. */
static void save(const char *root, long step, const char *payload, int keep)
{
    char tmp[512];
    cr_assert_eq(tri_ckpt_begin(root, step, tmp, sizeof tmp), 0);
    put_file(tmp, "model.safetensors", payload);
    put_file(tmp, "state.json", "{\"step\": 1}\n");
    cr_assert_eq(tri_ckpt_commit(root, step, tmp, keep), 0);
    struct stat st;
    cr_assert(lstat(tmp, &st) != 0 && errno == ENOENT, "%s still exists after commit", tmp);
}

/* stderr of the code under test, captured into a file beside the test's files */
typedef tt_capture capture;

static void cap_begin(capture *c, const char *dir)
{
    char path[600];
    snprintf(path, sizeof path, "%s/../%s.stderr", dir, strrchr(dir, '/') + 1);
    tt_capture_begin(c, path);
}

#define cap_end tt_capture_end

static void check_message(const char *msg, const char *const *must)
{
    cr_assert(strncmp(msg, "trident: ", 9) == 0, "[%s]", msg);
    const char *nl = strchr(msg, '\n');
    cr_assert(nl && nl[1] == '\0', "not one line: [%s]", msg);
    for (; *must; must++)
        cr_assert_not_null(strstr(msg, *must), "message [%s] does not name \"%s\"", msg, *must);
}

Test(ckpt_store, commit_then_latest_resolves)
{
    char dir[64], root[128], tmp[512], out[512], buf[256], ls[1024];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/runs/x/ckpt", dir); /* does not exist yet */

    cr_assert_eq(tri_ckpt_begin(root, 100, tmp, sizeof tmp), 0);
    char want_tmp[256];
    snprintf(want_tmp, sizeof want_tmp, "%s/.tmp-step_00000100-%ld", root, (long)getpid());
    cr_assert_str_eq(tmp, want_tmp);
    cr_assert(is_dir(root, strrchr(tmp, '/') + 1));
    put_file(tmp, "model.safetensors", "weights-100");
    cr_assert_eq(tri_ckpt_commit(root, 100, tmp, 0), 0);

    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,step_00000100");
    check_latest(root, "step_00000100");
    char step_dir[256];
    snprintf(step_dir, sizeof step_dir, "%s/step_00000100", root);
    cr_assert_str_eq(get_file(step_dir, "model.safetensors", buf, sizeof buf), "weights-100");

    cr_assert_eq(tri_ckpt_latest(root, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    cr_assert_eq(tri_ckpt_resolve(root, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    char slashed[300];
    snprintf(slashed, sizeof slashed, "%s//", root);
    cr_assert_eq(tri_ckpt_resolve(slashed, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    /* a step directory itself */
    snprintf(slashed, sizeof slashed, "%s/", step_dir);
    cr_assert_eq(tri_ckpt_resolve(slashed, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    cr_assert_eq(tri_ckpt_step_of(out), 100);
    cr_assert_eq(tri_ckpt_step_of("a/step_12x"), -1);
    cr_assert_eq(tri_ckpt_step_of("notes"), -1);
    /* a directory holding a config.json (a copied or Hugging Face style one) */
    char hf[256];
    snprintf(hf, sizeof hf, "%s/gpt2-copy", dir);
    cr_assert_eq(tri_mkdir_p(hf), 0);
    put_file(hf, "config.json", "{}");
    cr_assert_eq(tri_ckpt_resolve(hf, out, sizeof out), 0);
    cr_assert_str_eq(out, hf);
    remove_dir(dir);
}

Test(ckpt_store, keep_prunes_the_oldest_step_dirs_only)
{
    char dir[64], root[128], ls[2048], outside[256], link[300];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    cr_assert_eq(tri_mkdir_p(root), 0);
    /* things in root that are not checkpoints */
    char p[300];
    snprintf(p, sizeof p, "%s/notes", root);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/step_abc", root);
    cr_assert_eq(mkdir(p, 0755), 0);
    put_file(root, "step_00000001", "a file, not a directory");
    snprintf(outside, sizeof outside, "%s/elsewhere", dir);
    cr_assert_eq(mkdir(outside, 0755), 0);
    put_file(outside, "precious", "keep me");
    snprintf(link, sizeof link, "%s/step_00000002", root);
    cr_assert_eq(symlink(outside, link), 0);

    save(root, 10, "w10", 2);
    save(root, 20, "w20", 2);
    check_latest(root, "step_00000020");
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,notes,step_00000001,step_00000002,step_00000010,step_00000020,"
                         "step_abc");
    save(root, 30, "w30", 2);
    check_latest(root, "step_00000030");
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,notes,step_00000001,step_00000002,step_00000020,step_00000030,"
                         "step_abc");
    save(root, 40, "w40", 2);
    check_latest(root, "step_00000040");
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,notes,step_00000001,step_00000002,step_00000030,step_00000040,"
                         "step_abc");
    char buf[64];
    cr_assert_str_eq(get_file(outside, "precious", buf, sizeof buf), "keep me");

    /* committing an older step: it is never pruned, the newest `keep` stay too */
    save(root, 35, "w35", 2);
    check_latest(root, "step_00000035");
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,notes,step_00000001,step_00000002,step_00000035,step_00000040,"
                         "step_abc");
    /* keep = 0 keeps everything */
    save(root, 50, "w50", 0);
    save(root, 60, "w60", 0);
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,notes,step_00000001,step_00000002,step_00000035,step_00000040,"
                         "step_00000050,step_00000060,step_abc");
    /* keep = 1 */
    save(root, 70, "w70", 1);
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,notes,step_00000001,step_00000002,step_00000070,step_abc");
    check_latest(root, "step_00000070");
    remove_dir(dir);
}

Test(ckpt_store, crash_between_begin_and_commit_leaves_previous_intact)
{
    char dir[64], root[128], tmp[512], ls[2048], out[512], buf[64];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    save(root, 10, "w10", 3);

    /* a writer process dies after begin, half-way through its files */
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char t[512];
        if (tri_ckpt_begin(root, 20, t, sizeof t) != 0)
            _exit(1);
        char f[600];
        snprintf(f, sizeof f, "%s/model.safetensors", t);
        int fd = open(f, O_WRONLY | O_CREAT, 0644);
        if (fd < 0 || write(fd, "half", 4) != 4)
            _exit(1);
        _exit(0); /* no close, no commit */
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);

    check_latest(root, "step_00000010");
    cr_assert_eq(tri_ckpt_resolve(root, out, sizeof out), 0);
    cr_assert_str_eq(get_file(out, "model.safetensors", buf, sizeof buf), "w10");
    char dead_tmp[128];
    snprintf(dead_tmp, sizeof dead_tmp, ".tmp-step_00000020-%ld", (long)pid);
    cr_assert(is_dir(root, dead_tmp));

    /* begin again for the same step and pid: a fresh, empty directory */
    cr_assert_eq(tri_ckpt_begin(root, 15, tmp, sizeof tmp), 0);
    put_file(tmp, "junk", "x");
    cr_assert_eq(tri_ckpt_begin(root, 15, tmp, sizeof tmp), 0);
    list_dir(tmp, ls, sizeof ls);
    cr_assert_str_eq(ls, "");
    cr_assert_eq(rmdir(tmp), 0);

    /* another run's save of a later step, in progress */
    cr_assert_eq(mkdir(strcat(strcpy(buf, root), "/.tmp-step_00000050-1"), 0755), 0);

    /* the next commit (step 30) removes abandoned saves of older steps only */
    save(root, 30, "w30", 3);
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".tmp-step_00000050-1,latest,step_00000010,step_00000030");
    check_latest(root, "step_00000030");
    remove_dir(dir);
}

Test(ckpt_store, committing_a_step_twice_replaces_it)
{
    char dir[64], root[128], tmp[512], ls[2048], step_dir[256], buf[64];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    cr_assert_eq(tri_ckpt_begin(root, 10, tmp, sizeof tmp), 0);
    put_file(tmp, "model.safetensors", "first");
    put_file(tmp, "old_only", "x");
    cr_assert_eq(mkdir(strcat(strcpy(step_dir, tmp), "/sub"), 0755), 0);
    put_file(step_dir, "nested", "y"); /* subdirectories are synced and removed too */
    cr_assert_eq(tri_ckpt_commit(root, 10, tmp, 0), 0);
    save(root, 10, "second", 0);

    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, "latest,step_00000010"); /* no .tmp or .trash left */
    check_latest(root, "step_00000010");
    snprintf(step_dir, sizeof step_dir, "%s/step_00000010", root);
    list_dir(step_dir, ls, sizeof ls);
    cr_assert_str_eq(ls, "model.safetensors,state.json");
    cr_assert_str_eq(get_file(step_dir, "model.safetensors", buf, sizeof buf), "second");
    remove_dir(dir);
}

Test(ckpt_store, latest_errors_name_the_root_and_the_step)
{
    char dir[64], root[128], out[512];
    capture cap;
    char *msg;
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    cr_assert_eq(tri_mkdir_p(root), 0);

    cap_begin(&cap, dir);
    int rc = tri_ckpt_latest(root, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"no checkpoint in", root, NULL});
    free(msg);

    cap_begin(&cap, dir);
    rc = tri_ckpt_resolve(root, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"no checkpoint in", root, NULL});
    free(msg);

    /* latest names a directory that is not there */
    put_file(root, "latest", "step_00000999\n");
    cap_begin(&cap, dir);
    rc = tri_ckpt_resolve(root, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){root, "step_00000999", "missing", NULL});
    free(msg);

    /* latest that is not a step name (never followed outside root) */
    put_file(root, "latest", "../elsewhere\n");
    cap_begin(&cap, dir);
    rc = tri_ckpt_latest(root, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){root, "../elsewhere", NULL});
    free(msg);

    /* a path that does not exist */
    char nowhere[200];
    snprintf(nowhere, sizeof nowhere, "%s/nowhere", dir);
    cap_begin(&cap, dir);
    rc = tri_ckpt_resolve(nowhere, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){nowhere, NULL});
    free(msg);

    /* committing something that was never begun */
    cap_begin(&cap, dir);
    rc = tri_ckpt_commit(root, 5, nowhere, 0);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){nowhere, NULL});
    free(msg);

    /* a negative step */
    char tmp[512];
    cap_begin(&cap, dir);
    rc = tri_ckpt_begin(root, -1, tmp, sizeof tmp);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"-1", NULL});
    free(msg);
    remove_dir(dir);
}
