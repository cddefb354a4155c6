/* model/ckpt_store: the checkpoint store in one process (the end-to-end
 * faults are in tests/fault/test_store_faults.c). Checks look at the file system
 * itself (readdir, stat, contents; the manifest parsed here and its checksums
 * recomputed bit by bit), not through the functions under test. */
#include <criterion/criterion.h>

#include <cjson/cJSON.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers/testutil.h"
#include "model/ckpt/store.h"
#include "base/fs.h"

static int rm_cb(const char *p, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    return (type == FTW_DP ? rmdir(p) : unlink(p)) == 0 ? 0 : -1;
}

static void make_dir(char *dir, size_t n) {
    snprintf(dir, n, "/tmp/tri_ckpt_XXXXXX");
    cr_assert_not_null(mkdtemp(dir), "mkdtemp: %s", strerror(errno));
}

static void remove_dir(const char *dir) { nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS); }

static void put_file(const char *dir, const char *name, const char *text) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s: %s", p, strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
}

/* The content of dir/name ("" if missing), in a static-free caller buffer. */
static const char *get_file(const char *dir, const char *name, char *buf, size_t n) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    buf[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f) return buf;
    size_t k = fread(buf, 1, n - 1, f);
    buf[k] = '\0';
    fclose(f);
    return buf;
}

static int is_dir(const char *dir, const char *name) {
    char p[2048];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The sorted names in dir joined by ',' (without . and ..). */
static void list_dir(const char *dir, char *out, size_t n) {
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s: %s", dir, strerror(errno));
    char *names[64];
    size_t k = 0;
    struct dirent *de;
    while ((de = readdir(d)) && k < 64)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) names[k++] = strdup(de->d_name);
    closedir(d);
    qsort(names, k, sizeof *names, cmp_str);
    out[0] = '\0';
    for (size_t i = 0; i < k; i++) {
        if (i) strncat(out, ",", n - strlen(out) - 1);
        strncat(out, names[i], n - strlen(out) - 1);
        free(names[i]);
    }
}

/* root/latest holds "step_<8 digits>\n" naming an existing directory. */
static void check_latest(const char *root, const char *want) {
    char buf[256], line[64];
    snprintf(line, sizeof line, "%s\n", want);
    cr_assert_str_eq(get_file(root, "latest", buf, sizeof buf), line);
    cr_assert(is_dir(root, want), "latest names %s, which is not a directory", want);
}

/* stderr of the code under test, captured into a file beside the test's files */
typedef tt_capture capture;

static void cap_begin(capture *c, const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/../%s.stderr", dir, strrchr(dir, '/') + 1);
    tt_capture_begin(c, path);
}

#define cap_end tt_capture_end

static void check_message(const char *msg, const char *const *must) {
    cr_assert(strncmp(msg, "trident: ", 9) == 0, "[%s]", msg);
    const char *nl = strchr(msg, '\n');
    cr_assert(nl && nl[1] == '\0', "not one line: [%s]", msg);
    for (; *must; must++) cr_assert_not_null(strstr(msg, *must), "message [%s] does not name \"%s\"", msg, *must);
}

static int exists(const char *dir, const char *name) {
    char p[2048];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return lstat(p, &st) == 0;
}

static tri_ckpt_store open_store(const char *root) {
    tri_ckpt_store s;
    cr_assert_eq(tri_ckpt_store_open(&s, root, "checkpoint.dir"), 0, "open %s", root);
    cr_assert(s.is_open && s.locked);
    return s;
}

/* begin, write two files, commit. */
static void save(tri_ckpt_store *s, long step, const char *payload, int keep) {
    char tmp[512];
    cr_assert_eq(tri_ckpt_begin(s, step, tmp, sizeof tmp), 0);
    put_file(tmp, "model.safetensors", payload);
    put_file(tmp, "state.json", "{\"step\": 1}\n");
    cr_assert_eq(tri_ckpt_commit(s, step, tmp, keep), 0);
    struct stat st;
    cr_assert(lstat(tmp, &st) != 0 && errno == ENOENT, "%s still exists after commit", tmp);
}

/* CRC-32C bit by bit, from the definition (independent of src/base/crc32c.c). */
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

/* The manifest of dir lists exactly `names` (in that order) with their real
 * sizes and checksums, the step and a 16-hex-digit run; returns the run. */
static void check_manifest(const char *dir, long step, const char *const *names, char run[17]) {
    char path[2048];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = tt_read(path);
    cr_assert_not_null(text, "%s missing", path);
    cJSON *m = cJSON_Parse(text);
    free(text);
    cr_assert_not_null(m, "%s is not JSON", path);
    cr_assert_str_eq(cJSON_GetObjectItem(m, "format")->valuestring, "trident-checkpoint");
    cr_assert_eq(cJSON_GetObjectItem(m, "version")->valueint, 1);
    cr_assert_eq(cJSON_GetObjectItem(m, "step")->valuedouble, (double)step);
    cr_assert_str_eq(cJSON_GetObjectItem(m, "checksum")->valuestring, "crc32c");
    const char *r = cJSON_GetObjectItem(m, "run")->valuestring;
    cr_assert_eq(strlen(r), 16, "run [%s]", r);
    snprintf(run, 17, "%s", r);
    cJSON *files = cJSON_GetObjectItem(m, "files");
    int k = 0;
    for (cJSON *f = files->child; f; f = f->next, k++) {
        cr_assert_not_null(names[k], "more files listed than the %d expected", k);
        const char *nm = cJSON_GetObjectItem(f, "name")->valuestring;
        cr_assert_str_eq(nm, names[k]);
        snprintf(path, sizeof path, "%s/%s", dir, nm);
        struct stat st;
        cr_assert_eq(stat(path, &st), 0);
        cr_assert_eq(cJSON_GetObjectItem(f, "size")->valuedouble, (double)st.st_size, "%s", nm);
        char *data = tt_read(path);
        char want[9];
        snprintf(want, sizeof want, "%08" PRIx32, crc_bitwise((const unsigned char *)data, (size_t)st.st_size));
        free(data);
        cr_assert_str_eq(cJSON_GetObjectItem(f, "crc32c")->valuestring, want, "%s", nm);
    }
    cr_assert_null(names[k], "%s not listed", names[k]);
    cJSON_Delete(m);
}

/* Overwrites one byte of dir/name at offset with its complement (size unchanged). */
static void flip_byte(const char *dir, const char *name, long offset) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDWR);
    cr_assert(fd >= 0, "%s: %s", p, strerror(errno));
    unsigned char c;
    cr_assert_eq(pread(fd, &c, 1, offset), 1);
    c = (unsigned char)~c;
    cr_assert_eq(pwrite(fd, &c, 1, offset), 1);
    close(fd);
}

Test(ckpt_store, commit_writes_a_manifest_of_every_file_and_latest) {
    char dir[64], root[128], tmp[512], out[512], ls[1024], run[17];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/runs/x/ckpt", dir); /* does not exist yet */
    tri_ckpt_store s = open_store(root);

    cr_assert_eq(tri_ckpt_begin(&s, 100, tmp, sizeof tmp), 0);
    char want_tmp[256];
    snprintf(want_tmp, sizeof want_tmp, "%s/.tmp-step_00000100-%ld", root, (long)getpid());
    cr_assert_str_eq(tmp, want_tmp);
    put_file(tmp, "model.safetensors", "weights-100");
    put_file(tmp, "state.json", "{}");
    char sub[600];
    cr_assert_eq(mkdir(strcat(strcpy(sub, tmp), "/sub"), 0755), 0);
    put_file(sub, "nested", "y"); /* subdirectories are listed too */
    cr_assert_eq(tri_ckpt_commit(&s, 100, tmp, 0), 0);

    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".lock,latest,step_00000100");
    check_latest(root, "step_00000100");
    char step_dir[256];
    snprintf(step_dir, sizeof step_dir, "%s/step_00000100", root);
    check_manifest(step_dir, 100, (const char *const[]){"model.safetensors", "state.json", "sub/nested", NULL}, run);
    cr_assert_str_eq(run, s.run);
    char why[512];
    cr_assert_eq(tri_ckpt_verify(step_dir, why, sizeof why), 0, "%s", why);

    cr_assert_eq(tri_ckpt_resolve(root, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    char slashed[300];
    snprintf(slashed, sizeof slashed, "%s//", root);
    cr_assert_eq(tri_ckpt_resolve(slashed, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    snprintf(slashed, sizeof slashed, "%s/", step_dir); /* a step directory itself */
    cr_assert_eq(tri_ckpt_resolve(slashed, out, sizeof out), 0);
    cr_assert_str_eq(out, step_dir);
    cr_assert_eq(tri_ckpt_step_of(out), 100);
    cr_assert_eq(tri_ckpt_step_of("a/step_12x"), -1);
    cr_assert_eq(tri_ckpt_step_of("notes"), -1);
    /* a directory holding a config.json (a copied or Hugging Face style one, no manifest) */
    char hf[256];
    snprintf(hf, sizeof hf, "%s/gpt2-copy", dir);
    cr_assert_eq(tri_mkdir_p(hf), 0);
    put_file(hf, "config.json", "{}");
    cr_assert_eq(tri_ckpt_verify(hf, why, sizeof why), 1, "no manifest: nothing to verify");
    cr_assert_eq(tri_ckpt_resolve(hf, out, sizeof out), 0);
    cr_assert_str_eq(out, hf);
    tri_ckpt_store_close(&s);
    tri_ckpt_store_close(&s); /* idempotent */
    remove_dir(dir);
}

Test(ckpt_store, find_takes_the_newest_complete_checkpoint_whatever_latest_says) {
    char dir[64], root[128], want[256], p[512];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    tri_ckpt_found f;
    /* nothing there yet, not even the root */
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, "");
    cr_assert_eq(tri_ckpt_count(root, NULL, 0), 0);

    tri_ckpt_store s = open_store(root);
    save(&s, 10, "w10", 0);
    save(&s, 20, "w20", 0);
    save(&s, 30, "w30", 0);
    tri_ckpt_store_close(&s);
    snprintf(want, sizeof want, "%s/step_00000030", root);

    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);
    cr_assert_eq(f.step, 30);
    cr_assert_eq(f.verified, 1);
    cr_assert_str_eq(f.note, "", "latest agrees: nothing to say");

    snprintf(p, sizeof p, "%s/latest", root);
    cr_assert_eq(unlink(p), 0); /* latest deleted */
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);
    cr_assert_not_null(strstr(f.note, "latest"), "%s", f.note);

    put_file(root, "latest", "step_00000010\n"); /* stale */
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);
    cr_assert_not_null(strstr(f.note, "step_00000010"), "%s", f.note);

    put_file(root, "latest", "step_00000099\n"); /* names a deleted dir */
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);

    cr_assert_eq(unlink(p), 0);
    cr_assert_eq(mkfifo(p, 0644), 0); /* a named pipe is never opened blocking */
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);
    cr_assert_eq(unlink(p), 0);

    /* a newer step dir without a manifest (half copied) that latest does not name */
    snprintf(p, sizeof p, "%s/step_00000040", root);
    cr_assert_eq(mkdir(p, 0755), 0);
    put_file(p, "state.json", "{}");
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);
    char newest[512];
    cr_assert_eq(tri_ckpt_count(root, newest, sizeof newest), 4, "it still counts as a checkpoint");
    cr_assert_str_eq(newest, p);
    remove_dir(dir);
}

Test(ckpt_store, a_damaged_newest_checkpoint_is_named_with_the_previous_one_to_use) {
    char dir[64], root[128], p[512], why[1024];
    capture cap;
    char *msg;
    tri_ckpt_found f;
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    tri_ckpt_store s = open_store(root);
    save(&s, 10, "w10-weights", 0);
    save(&s, 20, "w20-weights", 0);
    save(&s, 30, "w30-weights", 0);
    tri_ckpt_store_close(&s);

    /* one flipped byte, same size */
    snprintf(p, sizeof p, "%s/step_00000030", root);
    flip_byte(p, "model.safetensors", 3);
    cr_assert_eq(tri_ckpt_verify(p, why, sizeof why), -1);
    cr_assert_not_null(strstr(why, "step_00000030/model.safetensors"), "%s", why);
    cr_assert_not_null(strstr(why, "CRC-32C"), "%s", why);
    cap_begin(&cap, dir);
    int rc = tri_ckpt_find(root, &f);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    cr_assert_str_eq(f.dir, "");
    check_message(msg, (const char *const[]){"step_00000030/model.safetensors", "step_00000020", "mv ",
                                             "damaged-step_00000030", "--resume", NULL});
    free(msg);

    /* the one before it truncated: the previous one to use is step 10 */
    snprintf(p, sizeof p, "%s/step_00000020/state.json", root);
    cr_assert_eq(truncate(p, 3), 0);
    snprintf(p, sizeof p, "%s/step_00000020", root);
    cr_assert_eq(tri_ckpt_verify(p, why, sizeof why), -1);
    cr_assert_not_null(strstr(why, "3 bytes"), "%s", why);
    cap_begin(&cap, dir);
    rc = tri_ckpt_find(root, &f);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"step_00000030/model.safetensors", "step_00000010", NULL});
    free(msg);

    /* and that one misses a file: none verifies */
    snprintf(p, sizeof p, "%s/step_00000010/state.json", root);
    cr_assert_eq(unlink(p), 0);
    cap_begin(&cap, dir);
    rc = tri_ckpt_find(root, &f);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"step_00000030", "no earlier complete checkpoint", NULL});
    free(msg);
    snprintf(p, sizeof p, "%s/step_00000010", root);
    cr_assert_eq(tri_ckpt_verify(p, why, sizeof why), -1);
    cr_assert_not_null(strstr(why, "state.json: missing"), "%s", why);

    /* sample/eval given the damaged dir itself */
    snprintf(p, sizeof p, "%s/step_00000030", root);
    char out[512];
    cap_begin(&cap, dir);
    rc = tri_ckpt_resolve(p, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"does not verify", "model.safetensors", NULL});
    free(msg);
    remove_dir(dir);
}

Test(ckpt_store, a_bad_manifest_is_named) {
    char dir[64], root[128], p[512], why[1024], text[4096];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    tri_ckpt_store s = open_store(root);
    save(&s, 5, "w5", 0);
    tri_ckpt_store_close(&s);
    snprintf(p, sizeof p, "%s/step_00000005", root);
    get_file(p, "manifest.json", text, sizeof text);
    const struct {
        const char *from, *to, *must;
    } cases[] = {
        {"\"model.safetensors\"", "\"../model.safetensors\"", "not a relative path"},
        {"\"model.safetensors\"", "\"/etc/passwd\"", "not a relative path"},
        {"\"crc32c\":\t\"", "\"crc32c\":\t\"zz", "8 hex digits"},
        {"\"step\":\t5", "\"step\":\t6", "says step 6"},
        {"\"version\":\t1", "\"version\":\t2", "version"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *at = strstr(text, cases[i].from);
        cr_assert_not_null(at, "case %zu: [%s] not in %s", i, cases[i].from, text);
        char bad[4200];
        snprintf(bad, sizeof bad, "%.*s%s%s", (int)(at - text), text, cases[i].to, at + strlen(cases[i].from));
        put_file(p, "manifest.json", bad);
        cr_assert_eq(tri_ckpt_verify(p, why, sizeof why), -1, "case %zu accepted", i);
        cr_assert_not_null(strstr(why, cases[i].must), "case %zu: %s", i, why);
    }
    /* truncated */
    put_file(p, "manifest.json", "{\"format\": \"trident-checkpoint\", \"ver");
    cr_assert_eq(tri_ckpt_verify(p, why, sizeof why), -1);
    cr_assert_not_null(strstr(why, "manifest.json: not valid JSON"), "%s", why);
    put_file(p, "manifest.json", text);
    cr_assert_eq(tri_ckpt_verify(p, why, sizeof why), 0, "%s", why);
    remove_dir(dir);
}

Test(ckpt_store, pre_manifest_checkpoints_resume_only_when_latest_names_them) {
    char dir[64], root[128], p[512], want[512];
    capture cap;
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    /* what a trident from before manifests left: a step dir, no latest (deleted) */
    snprintf(p, sizeof p, "%s/step_00000005", root);
    cr_assert_eq(tri_mkdir_p(p), 0);
    put_file(p, "model.safetensors", "old");
    put_file(p, "state.json", "{}");
    tri_ckpt_found f;
    cap_begin(&cap, dir);
    int rc = tri_ckpt_find(root, &f);
    char *msg = cap_end(&cap);
    cr_assert_eq(rc, -1, "never a silent fresh start");
    check_message(msg, (const char *const[]){"step_00000005", "echo step_00000005 >", "latest", NULL});
    free(msg);

    put_file(root, "latest", "step_00000005\n");
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, p);
    cr_assert_eq(f.verified, 0);
    cr_assert_not_null(strstr(f.note, "manifest"), "%s", f.note);

    /* resumed and saved once more: the complete one is newer and wins */
    tri_ckpt_store s = open_store(root);
    cr_assert_eq(tri_ckpt_store_adopt(&s, f.dir), 0, "no manifest: keeps its fresh run");
    save(&s, 6, "w6", 1);
    save(&s, 7, "w7", 1);
    save(&s, 8, "w8", 1);
    tri_ckpt_store_close(&s);
    put_file(root, "latest", "step_00000005\n");
    snprintf(want, sizeof want, "%s/step_00000008", root);
    cr_assert_eq(tri_ckpt_find(root, &f), 0);
    cr_assert_str_eq(f.dir, want);
    cr_assert_eq(f.verified, 1);
    char ls[1024];
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".lock,latest,step_00000005,step_00000008", "keep=1 never prunes the old one");
    remove_dir(dir);
}

Test(ckpt_store, pruning_removes_only_this_runs_checkpoints) {
    char dir[64], root[128], ls[2048], outside[256], link[300], p[300], buf[64];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    cr_assert_eq(tri_mkdir_p(root), 0);
    /* things in root that are not checkpoints */
    snprintf(p, sizeof p, "%s/notes", root);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/step_abc", root);
    cr_assert_eq(mkdir(p, 0755), 0);
    put_file(root, "step_00000001", "a file, not a directory");
    snprintf(outside, sizeof outside, "%s/elsewhere", dir);
    cr_assert_eq(mkdir(outside, 0755), 0);
    put_file(outside, "precious", "keep me");
    put_file(outside, "manifest.json", "{}");
    snprintf(link, sizeof link, "%s/step_00000002", root);
    cr_assert_eq(symlink(outside, link), 0);
    const char *others = "notes,step_00000001,step_00000002";

    /* run A */
    tri_ckpt_store a = open_store(root);
    save(&a, 10, "a10", 0);
    save(&a, 20, "a20", 0);
    tri_ckpt_store_close(&a);
    /* run B, a fresh start over the same dir (as a user's copy would be) */
    tri_ckpt_store b = open_store(root);
    cr_assert_str_neq(a.run, b.run);
    save(&b, 30, "b30", 2);
    save(&b, 40, "b40", 2);
    save(&b, 50, "b50", 2);
    list_dir(root, ls, sizeof ls);
    char want[2048];
    snprintf(want, sizeof want, ".lock,latest,%s,step_00000010,step_00000020,step_00000040,step_00000050,step_abc",
             others);
    cr_assert_str_eq(ls, want, "B prunes its own 30, never A's");
    save(&b, 60, "b60", 1);
    list_dir(root, ls, sizeof ls);
    snprintf(want, sizeof want, ".lock,latest,%s,step_00000010,step_00000020,step_00000060,step_abc", others);
    cr_assert_str_eq(ls, want);
    /* committing an older step: never pruned, nor the newest */
    save(&b, 55, "b55", 1);
    list_dir(root, ls, sizeof ls);
    snprintf(want, sizeof want, ".lock,latest,%s,step_00000010,step_00000020,step_00000055,step_00000060,step_abc",
             others);
    cr_assert_str_eq(ls, want);
    tri_ckpt_store_close(&b);

    /* run C resumes B's step 60: B's checkpoints are its run's */
    tri_ckpt_store c = open_store(root);
    snprintf(p, sizeof p, "%s/step_00000060", root);
    cr_assert_eq(tri_ckpt_store_adopt(&c, p), 0);
    cr_assert_str_eq(c.run, b.run);
    save(&c, 70, "c70", 1);
    list_dir(root, ls, sizeof ls);
    snprintf(want, sizeof want, ".lock,latest,%s,step_00000010,step_00000020,step_00000070,step_abc", others);
    cr_assert_str_eq(ls, want);

    /* C saving a step A wrote: A's is moved aside and kept, not deleted */
    save(&c, 10, "c10", 1);
    list_dir(root, ls, sizeof ls);
    cr_assert_not_null(strstr(ls, "replaced-step_00000010-"), "%s", ls);
    char *r = strstr(ls, "replaced-step_00000010-");
    char rname[128];
    snprintf(rname, sizeof rname, "%.*s", (int)strcspn(r, ","), r);
    snprintf(p, sizeof p, "%s/%s", root, rname);
    cr_assert_str_eq(get_file(p, "model.safetensors", buf, sizeof buf), "a10");
    snprintf(p, sizeof p, "%s/step_00000010", root);
    cr_assert_str_eq(get_file(p, "model.safetensors", buf, sizeof buf), "c10");
    cr_assert(exists(root, "step_00000020") && exists(root, "step_00000070"));
    tri_ckpt_store_close(&c);
    cr_assert_str_eq(get_file(outside, "precious", buf, sizeof buf), "keep me");
    remove_dir(dir);
}

Test(ckpt_store, committing_a_step_twice_replaces_it) {
    char dir[64], root[128], tmp[512], ls[2048], step_dir[256], buf[64];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    tri_ckpt_store s = open_store(root);
    cr_assert_eq(tri_ckpt_begin(&s, 10, tmp, sizeof tmp), 0);
    put_file(tmp, "model.safetensors", "first");
    put_file(tmp, "old_only", "x");
    cr_assert_eq(tri_ckpt_commit(&s, 10, tmp, 0), 0);
    save(&s, 10, "second", 0);
    tri_ckpt_store_close(&s);

    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".lock,latest,step_00000010"); /* no .tmp or .trash left */
    check_latest(root, "step_00000010");
    snprintf(step_dir, sizeof step_dir, "%s/step_00000010", root);
    list_dir(step_dir, ls, sizeof ls);
    cr_assert_str_eq(ls, "manifest.json,model.safetensors,state.json");
    cr_assert_str_eq(get_file(step_dir, "model.safetensors", buf, sizeof buf), "second");
    remove_dir(dir);
}

/* A child process holds the store; the parent's open is refused naming it. */
Test(ckpt_store, a_second_writer_is_refused_naming_the_holder) {
    char dir[64], root[128], host[256] = "", pidtext[64], lockpath[256];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    gethostname(host, sizeof host - 1);
    int ready[2], go[2];
    cr_assert_eq(pipe(ready), 0);
    cr_assert_eq(pipe(go), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        tri_ckpt_store s;
        char c = tri_ckpt_store_open(&s, root, "checkpoint.dir") == 0 ? 'y' : 'n';
        if (write(ready[1], &c, 1) != 1 || read(go[0], &c, 1) != 1) _exit(1);
        tri_ckpt_store_close(&s);
        _exit(0);
    }
    char c = 0;
    cr_assert_eq(read(ready[0], &c, 1), 1);
    cr_assert_eq(c, 'y');
    snprintf(lockpath, sizeof lockpath, "%s/.lock", root);

    tri_ckpt_store s;
    capture cap;
    cap_begin(&cap, dir);
    int rc = tri_ckpt_store_open(&s, root, "checkpoint.dir");
    char *msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    snprintf(pidtext, sizeof pidtext, "pid %ld on host ", (long)pid);
    check_message(
        msg, (const char *const[]){"checkpoint.dir", root, "in use by another trainer", pidtext, host, lockpath, NULL});
    free(msg);
    cr_assert_eq(s.is_open, 0);
    tri_ckpt_store_close(&s); /* closing a refused store is harmless */

    cr_assert_eq(write(go[1], "x", 1), 1);
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    /* released: the next writer gets it, and a second open in one process is refused too */
    s = open_store(root);
    char buf[256];
    snprintf(pidtext, sizeof pidtext, "pid %ld on host %s since ", (long)getpid(), host);
    cr_assert(strncmp(get_file(root, ".lock", buf, sizeof buf), pidtext, strlen(pidtext)) == 0, "[%s]", buf);
    tri_ckpt_store s2;
    cap_begin(&cap, dir);
    rc = tri_ckpt_store_open(&s2, root, "checkpoint.dir");
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    free(msg);
    tri_ckpt_store_close(&s);
    cr_assert_str_eq(get_file(root, ".lock", buf, sizeof buf), "", "the holder's line goes with the lock");
    remove_dir(dir);
}

Test(ckpt_store, stale_temp_dirs_go_at_open_and_a_failed_save_by_abort) {
    char dir[64], root[128], p[512], tmp[512], ls[2048];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    cr_assert_eq(tri_mkdir_p(root), 0);
    pid_t dead = fork(); /* a pid that is not alive any more */
    cr_assert(dead >= 0);
    if (dead == 0) _exit(0);
    cr_assert_eq(waitpid(dead, NULL, 0), dead);
    snprintf(p, sizeof p, "%s/.tmp-step_00000003-%ld", root, (long)dead);
    cr_assert_eq(mkdir(p, 0755), 0);
    put_file(p, "model.safetensors", "half");
    /* a live process's (the test runner's) that holds no lock: abandoned too */
    snprintf(p, sizeof p, "%s/.tmp-step_00000004-%ld", root, (long)getppid());
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/.trash-step_00000001-%ld", root, (long)dead);
    cr_assert_eq(mkdir(p, 0755), 0);
    snprintf(p, sizeof p, "%s/.tmp-notes", root); /* not a temp dir's name: untouched */
    cr_assert_eq(mkdir(p, 0755), 0);

    tri_ckpt_store s = open_store(root);
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".lock,.tmp-notes");

    cr_assert_eq(tri_ckpt_begin(&s, 7, tmp, sizeof tmp), 0);
    put_file(tmp, "model.safetensors", "x");
    tri_ckpt_abort(&s, tmp);
    tri_ckpt_abort(&s, "");
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".lock,.tmp-notes");
    tri_ckpt_store_close(&s);
    remove_dir(dir);
}

Test(ckpt_store, crash_between_begin_and_commit_leaves_previous_intact) {
    char dir[64], root[128], ls[2048], out[512], buf[64];
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    tri_ckpt_store s = open_store(root);
    save(&s, 10, "w10", 3);
    tri_ckpt_store_close(&s);

    /* a writer process dies after begin, half-way through its files */
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        tri_ckpt_store w;
        char t[512];
        if (tri_ckpt_store_open(&w, root, "checkpoint.dir") != 0 || tri_ckpt_begin(&w, 20, t, sizeof t) != 0) _exit(1);
        char f[600];
        snprintf(f, sizeof f, "%s/model.safetensors", t);
        int fd = open(f, O_WRONLY | O_CREAT, 0644);
        if (fd < 0 || write(fd, "half", 4) != 4) _exit(1);
        _exit(0); /* no close, no commit: the kernel drops the lock */
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
    /* the next writer removes it */
    s = open_store(root);
    list_dir(root, ls, sizeof ls);
    cr_assert_str_eq(ls, ".lock,latest,step_00000010");
    tri_ckpt_store_close(&s);
    remove_dir(dir);
}

Test(ckpt_store, open_refuses_a_bad_dir_naming_the_key) {
    char dir[64], p[512];
    capture cap;
    char *msg;
    tri_ckpt_store s;
    make_dir(dir, sizeof dir);
    cap_begin(&cap, dir);
    int rc = tri_ckpt_store_open(&s, "", "checkpoint.dir");
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"checkpoint.dir", "empty", NULL});
    free(msg);

    put_file(dir, "afile", "x");
    snprintf(p, sizeof p, "%s/afile/ckpt", dir);
    cap_begin(&cap, dir);
    rc = tri_ckpt_store_open(&s, p, "checkpoint.dir");
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    char afile[300];
    snprintf(afile, sizeof afile, "%s/afile is a file", dir);
    check_message(msg, (const char *const[]){"checkpoint.dir", afile, NULL});
    free(msg);

    snprintf(p, sizeof p, "%s/ckpt/.lock", dir); /* the lock file's name taken by a directory */
    cr_assert_eq(tri_mkdir_p(p), 0);
    snprintf(p, sizeof p, "%s/ckpt", dir);
    cap_begin(&cap, dir);
    rc = tri_ckpt_store_open(&s, p, "checkpoint.dir");
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"checkpoint.dir", ".lock", NULL});
    free(msg);
    remove_dir(dir);
}

Test(ckpt_store, resolve_errors_name_the_path) {
    char dir[64], root[128], out[512], p[512];
    capture cap;
    char *msg;
    make_dir(dir, sizeof dir);
    snprintf(root, sizeof root, "%s/ckpt", dir);
    cr_assert_eq(tri_mkdir_p(root), 0);

    cap_begin(&cap, dir); /* an empty root */
    int rc = tri_ckpt_resolve(root, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"no checkpoint in", root, NULL});
    free(msg);

    put_file(root, "latest", "step_00000999\n"); /* latest names a dir that is not there */
    cap_begin(&cap, dir);
    rc = tri_ckpt_resolve(root, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"no checkpoint in", root, NULL});
    free(msg);

    snprintf(p, sizeof p, "%s/nowhere", dir);
    cap_begin(&cap, dir);
    rc = tri_ckpt_resolve(p, out, sizeof out);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){p, NULL});
    free(msg);

    /* committing something never begun; a negative step */
    tri_ckpt_store s = open_store(root);
    cap_begin(&cap, dir);
    rc = tri_ckpt_commit(&s, 5, p, 0);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){p, NULL});
    free(msg);
    char tmp[512];
    cap_begin(&cap, dir);
    rc = tri_ckpt_begin(&s, -1, tmp, sizeof tmp);
    msg = cap_end(&cap);
    cr_assert_eq(rc, -1);
    check_message(msg, (const char *const[]){"-1", NULL});
    free(msg);
    tri_ckpt_store_close(&s);
    remove_dir(dir);
}
