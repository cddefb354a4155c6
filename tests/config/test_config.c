/* The configuration system (src/config/config.c) against values written out by hand:
 * the defaults and the shipped configs are compared with the numbers of the
 * specification field by field (not through the field table), every error
 * case must return -1 and print exactly one stderr line that starts
 * "trident: <file>: " and names the key and the numbers, and to_json ->
 * load_string must give back a config whose every member (listed by hand)
 * is identical, including doubles one ulp off a short decimal and seeds
 * above 2^53. The help text must list every key that to_json writes (an
 * independent path through the table), and that count must be the 37 members
 * of the struct counted by hand.
 *
 * stderr is captured by pointing fd 2 at a file in the test's temporary
 * directory (Criterion runs each test in its own process). */
#include <criterion/criterion.h>

#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config/config.h"
#include "model/gpt.h"

#define N_CONFIG_FIELDS 80 /* members of tri_config minus `source`, counted by hand */

/* ------------------------------------------------------------------------ */
/* Temporary directory, files, stderr capture                               */

static char tmpdir[64];
static int n_files;

static void setup(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/tri_test_config_XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir), "mkdtemp failed");
    n_files = 0;
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

static void teardown(void) {
    if (tmpdir[0] != '\0') nftw(tmpdir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

TestSuite(config, .init = setup, .fini = teardown);

/* Writes `text` to a new file in tmpdir; its path goes to path (256 bytes). */
static void write_tmp(const char *text, char *path) {
    snprintf(path, 256, "%s/c%d.json", tmpdir, n_files++);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f, "cannot create %s", path);
    size_t n = strlen(text);
    cr_assert_eq(fwrite(text, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

typedef struct capture {
    int saved_fd;
    char path[300];
} capture;

static void capture_begin(capture *c) {
    snprintf(c->path, sizeof c->path, "%s/stderr%d.txt", tmpdir, n_files++);
    fflush(stderr);
    int fd = open(c->path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert(fd >= 0, "cannot create %s", c->path);
    c->saved_fd = dup(2);
    cr_assert(c->saved_fd >= 0);
    cr_assert(dup2(fd, 2) >= 0);
    close(fd);
}

/* Restores stderr and returns what was written (malloc'd). */
static char *capture_end(capture *c) {
    fflush(stderr);
    cr_assert(dup2(c->saved_fd, 2) >= 0);
    close(c->saved_fd);
    FILE *f = fopen(c->path, "rb");
    cr_assert_not_null(f);
    char *buf = calloc(1, 65536);
    cr_assert_not_null(buf);
    size_t n = fread(buf, 1, 65535, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Error checks                                                             */

/* The message `err` must be one line, "trident: <file>: ..." with every
 * needle (NULL-terminated list) somewhere after the file name. */
static void check_message(const char *err, const char *file, const char *const *needles, const char *what) {
    size_t len = strlen(err);
    cr_assert(len > 0 && err[len - 1] == '\n', "[%s] expected one line on stderr, got \"%s\"", what, err);
    cr_assert_null(memchr(err, '\n', len - 1), "[%s] more than one line: \"%s\"", what, err);
    char head[600];
    snprintf(head, sizeof head, "trident: %s: ", file);
    cr_assert(strncmp(err, head, strlen(head)) == 0, "[%s] \"%s\" does not start \"%s\"", what, err, head);
    for (const char *const *n = needles; *n != NULL; n++)
        cr_expect_not_null(strstr(err + strlen(head), *n), "[%s] \"%s\" lacks \"%s\"", what, err, *n);
}

/* Loads `json` (written to a file) with overrides; expects -1, *cfg untouched
 * and one message naming the file and holding every needle. */
static void expect_error_ov(const char *json, int n_ov, const char *const *ov, const char *const *needles) {
    char path[256];
    write_tmp(json, path);
    tri_config cfg, before;
    memset(&cfg, 0x5a, sizeof cfg);
    before = cfg;
    capture c;
    capture_begin(&c);
    int rc = tri_config_load(&cfg, path, n_ov, ov);
    char *err = capture_end(&c);
    cr_expect_eq(rc, -1, "[%s] load returned %d", json, rc);
    cr_expect(memcmp(&cfg, &before, sizeof cfg) == 0, "[%s] *cfg changed on failure", json);
    check_message(err, path, needles, json);
    free(err);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})
#define OVS(...) \
    (int)(sizeof((const char *const[]){__VA_ARGS__}) / sizeof(const char *)), ((const char *const[]){__VA_ARGS__})
#define EXPECT_ERROR(json, ...) expect_error_ov(json, 0, NULL, NEEDLES(__VA_ARGS__))
/* A valid file (data.train set) with one bad override. */
#define EXPECT_SET_ERROR(ov, ...) expect_error_ov("{\"data\": {\"train\": \"t.bin\"}}", OVS(ov), NEEDLES(__VA_ARGS__))

/* ------------------------------------------------------------------------ */
/* Error cases                                                              */

Test(config, unknown_section_and_key) {
    EXPECT_ERROR("{\"trainn\": {\"lr\": 1}}", "trainn", "unknown section");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"lrr\": 0.1}}", "train.lrr", "unknown key");
    EXPECT_ERROR("{\"model\": {\"N_LAYER\": 2}}", "model.N_LAYER", "unknown key");
    /* the message of the specification, character for character */
    char path[256];
    write_tmp("{\"train\": {\"lrr\": 1}}", path);
    tri_config cfg;
    capture c;
    capture_begin(&c);
    cr_assert_eq(tri_config_load(&cfg, path, 0, NULL), -1);
    char *err = capture_end(&c);
    char want[400];
    snprintf(want, sizeof want, "trident: %s: train.lrr: unknown key\n", path);
    cr_expect_str_eq(err, want);
    free(err);
}

Test(config, wrong_json_types) {
    EXPECT_ERROR("{\"train\": {\"lr\": \"0.1\"}}", "train.lr", "expected a number, got a string");
    EXPECT_ERROR("{\"train\": {\"steps\": true}}", "train.steps", "got true");
    EXPECT_ERROR("{\"model\": {\"n_head\": null}}", "model.n_head", "got null");
    EXPECT_ERROR("{\"model\": {\"n_head\": [4]}}", "model.n_head", "got an array");
    EXPECT_ERROR("{\"data\": {\"train\": 5}}", "data.train", "expected a string, got a number");
    EXPECT_ERROR("{\"train\": 3}", "train", "expected an object, got a number");
    EXPECT_ERROR("[1, 2]", "expected a JSON object", "got an array");
    EXPECT_ERROR("{\"train\": {\"seed\": false}}", "train.seed", "got false");
}

/* The one top-level key: "device" (a choice), in the file or by --set. */
Test(config, device_is_a_top_level_choice) {
    EXPECT_ERROR("{\"device\": \"gpu\", \"data\": {\"train\": \"t.bin\"}}", "device: \"gpu\" is not one of",
                 "cpu|cpu-guard|cuda");
    EXPECT_ERROR("{\"device\": 1, \"data\": {\"train\": \"t.bin\"}}", "device: expected a string, got a number");
    EXPECT_ERROR("{\"device\": \"cuda\", \"device\": \"cpu\", \"data\": {\"train\": \"t.bin\"}}",
                 "device: key given twice");
    EXPECT_SET_ERROR("device=tpu", "device: \"tpu\" is not one of");
    char path[256];
    write_tmp("{\"device\": \"cuda\", \"data\": {\"train\": \"t.bin\"}}", path);
    tri_config cfg;
    cr_assert_eq(tri_config_load(&cfg, path, 0, NULL), 0);
    cr_expect_eq(cfg.device, TRI_DEVICE_CUDA);
    cr_assert_eq(tri_config_load(&cfg, path, OVS("device=cpu-guard")), 0);
    cr_expect_eq(cfg.device, TRI_DEVICE_CPU_GUARD);
    write_tmp("{\"data\": {\"train\": \"t.bin\"}}", path);
    cr_assert_eq(tri_config_load(&cfg, path, 0, NULL), 0);
    cr_expect_eq(cfg.device, TRI_DEVICE_CPU, "the default");
}

Test(config, integer_fields_reject_fractions) {
    EXPECT_ERROR("{\"train\": {\"steps\": 1.5}}", "train.steps", "expected an integer, got 1.5");
    EXPECT_ERROR("{\"model\": {\"n_layer\": 2.000001}}", "model.n_layer", "2.000001");
    EXPECT_ERROR("{\"train\": {\"seed\": 12.5}}", "train.seed", "12.5");
    /* beyond int: named with the number, not wrapped around */
    EXPECT_ERROR("{\"train\": {\"steps\": 1e10}}", "train.steps", "10000000000");
    EXPECT_ERROR("{\"model\": {\"n_embd\": -3000000000}}", "model.n_embd", "-3000000000");
}

Test(config, out_of_range_values) {
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"lr\": -1}}", "train.lr",
                 "expected a number > 0, got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"lr\": 0}}", "train.lr", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"min_lr\": -0.5}}", "train.min_lr", ">= 0", "-0.5");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"n_layer\": 0}}", "model.n_layer", ">= 1", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"n_head\": -2}}", "model.n_head", "got -2");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"n_embd\": 0}}", "model.n_embd", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"seq_len\": 0}}", "model.seq_len", ">= 1", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"vocab_size\": 1}}", "model.vocab_size",
                 "[2, 2147483648)", "got 1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"vocab_size\": 2147483648}}", "model.vocab_size",
                 "[2, 2147483648)", "got 2147483648");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"global_batch\": 0}}", "train.global_batch", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"micro_batch\": -4}}", "train.micro_batch", "got -4");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"steps\": -1}}", "train.steps", ">= 0", "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"beta1\": 1}}", "train.beta1", "[0, 1)", "got 1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"beta2\": -0.01}}", "train.beta2", "[0, 1)", "got -0.01");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"eps\": 0}}", "train.eps", "> 0", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"warmup_steps\": -1}}", "train.warmup_steps", ">= 0",
                 "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"grad_clip\": -0.25}}", "train.grad_clip", ">= 0",
                 "got -0.25");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"weight_decay\": -1}}", "train.weight_decay", "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"eval_batches\": 0}}", "train.eval_batches", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"tp\": 0}}", "parallel.tp", ">= 1", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"pp\": -1}}", "parallel.pp", "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"dp\": 0}}", "parallel.dp", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"bucket_mb\": 0}}", "parallel.bucket_mb",
                 "in [0.0009765625, 1048576]", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"timeout_s\": -1}}", "parallel.timeout_s",
                 "in [0, 1000000]", "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"timeout_s\": 2e6}}", "parallel.timeout_s",
                 "in [0, 1000000]", "got 2000000");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"zero\": 4}}", "parallel.zero", "in [0, 3]", "got 4");
    {
        /* parallel.zero was a switch before stages 2 and 3: true/false still read as 1/0 */
        tri_config z;
        cr_expect_eq(tri_config_load_string(&z, "{\"data\": {\"train\": \"x\"}, \"parallel\": {\"zero\": true}}", NULL),
                     0);
        cr_expect_eq(z.parallel.zero, 1);
        cr_expect_eq(tri_config_load(&z, NULL, OVS("data.train=x", "parallel.zero=true")), 0);
        cr_expect_eq(z.parallel.zero, 1);
        cr_expect_eq(tri_config_load(&z, NULL, OVS("data.train=x", "parallel.zero=3")), 0);
        cr_expect_eq(z.parallel.zero, 3);
    }
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"zero\": 2, \"zero_keep_params\": true}}",
                 "parallel.zero_keep_params", "parallel.zero = 3", "got parallel.zero = 2");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"cp\": 0}}", "parallel.cp", ">= 1", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"progress_timeout_s\": -1}}",
                 "parallel.progress_timeout_s", "in [0, 1000000]", "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"log\": {\"straggler_every\": -1}}", "log.straggler_every",
                 "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"log\": {\"straggler_factor\": 1}}", "log.straggler_factor",
                 "got 1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"debug\": {\"sleep_ms\": -5}}", "debug.sleep_ms", "got -5");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"log\": {\"every\": 0}}", "log.every", "got 0");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"checkpoint\": {\"keep\": -1}}", "checkpoint.keep", "got -1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"debug\": {\"fail_step\": -2}}", "debug.fail_step", ">= -1",
                 "got -2");
    /* cJSON reads 1e400 as infinity */
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"lr\": 1e400}}", "train.lr", "finite");
}

/* A valid file with several overrides, OVS(...) */
#define EXPECT_SETS_ERROR(ovs, ...) expect_error_ov("{\"data\": {\"train\": \"t.bin\"}}", ovs, NEEDLES(__VA_ARGS__))

/* Hostile sizes (issue 22): products of the parallel sizes that wrapped an int
 * (pp 2^28 x vpp 16 = 2^32 became 0 chunks and a SIGFPE; tp 2^16 x pp 2^16),
 * and bucket sizes that meant one bucket per float (1e-9 MiB) or a
 * float-to-integer overflow (1e300). Each is refused at load, naming the keys,
 * their values and the limit; the limits themselves load. */
Test(config, parallel_sizes_and_bucket_mb_have_sane_ranges) {
    EXPECT_SETS_ERROR(OVS("parallel.pp=268435456", "parallel.vpp=16"), "parallel.pp (268435456)", "parallel.tp (1)",
                      "= 268435456 ranks", "at most 1048576");
    EXPECT_SETS_ERROR(OVS("parallel.tp=65536", "parallel.pp=65536"), "parallel.tp (65536)", "= 4294967296 ranks",
                      "at most 1048576");
    EXPECT_SETS_ERROR(OVS("parallel.tp=1024", "parallel.pp=1024", "parallel.dp=2"), "= 2097152 ranks",
                      "at most 1048576");
    EXPECT_SETS_ERROR(OVS("parallel.cp=1024", "parallel.tp=1024", "parallel.dp=2"), "parallel.cp (1024)",
                      "= 2097152 ranks", "at most 1048576");
    EXPECT_SETS_ERROR(OVS("parallel.cp=3"), "parallel.cp (3)", "model.seq_len (128)", "2 x parallel.cp = 6");
    EXPECT_SETS_ERROR(OVS("parallel.pp=2", "parallel.vpp=17"), "parallel.vpp", "at most 16", "got 17");
    /* the default model has 4 layers: 2 x 4 chunks cannot each hold one */
    EXPECT_SETS_ERROR(OVS("parallel.pp=2", "parallel.vpp=4"), "parallel.pp (2) x parallel.vpp (4) = 8",
                      "model.n_layer (4)");
    EXPECT_SETS_ERROR(OVS("parallel.pp=65536", "parallel.vpp=16"), "parallel.pp (65536) x parallel.vpp (16) = 1048576",
                      "model.n_layer (4)");
    EXPECT_SETS_ERROR(OVS("train.global_batch=2147483647", "train.micro_batch=1"),
                      "train.global_batch (2147483647) / (train.micro_batch (1) x parallel.dp (1)) = 2147483647",
                      "at most 65536");
    EXPECT_SETS_ERROR(OVS("train.global_batch=131074", "train.micro_batch=1", "parallel.dp=2"), "= 65537 micro-batches",
                      "at most 65536");
    EXPECT_SETS_ERROR(OVS("model.n_layer=128", "parallel.pp=128", "train.global_batch=65536", "train.micro_batch=1"),
                      "parallel.pp (128) x parallel.vpp (1) x 65536 micro-batches", "= 8388608 pipeline units",
                      "at most 4194304");
    EXPECT_SETS_ERROR(OVS("parallel.bucket_mb=1e-9"), "parallel.bucket_mb", "in [0.0009765625, 1048576]", "got 1e-09");
    EXPECT_SETS_ERROR(OVS("parallel.bucket_mb=1e300"), "parallel.bucket_mb", "in [0.0009765625, 1048576]",
                      "got 1e+300");
    EXPECT_SETS_ERROR(OVS("parallel.bucket_mb=1048577"), "parallel.bucket_mb", "got 1048577");
    tri_config c;
    const char *at_limits[] = {"data.train=t.bin", "parallel.tp=1024", "parallel.pp=4", "parallel.dp=256",
                               "parallel.bucket_mb=1048576"};
    cr_expect_eq(tri_config_load(&c, NULL, 5, at_limits), 0);
    cr_expect_eq((long long)c.parallel.tp * c.parallel.pp * c.parallel.dp, 1 << 20);
    const char *small[] = {"data.train=t.bin", "model.n_layer=32", "parallel.pp=2", "parallel.vpp=16",
                           "parallel.bucket_mb=0.0009765625"};
    cr_expect_eq(tri_config_load(&c, NULL, 5, small), 0);
    cr_expect_eq(c.parallel.bucket_mb, 1.0 / 1024);
    const char *most_micro[] = {"data.train=t.bin", "train.global_batch=131072", "train.micro_batch=1",
                                "parallel.dp=2"};
    cr_expect_eq(tri_config_load(&c, NULL, 4, most_micro), 0);
    const char *most_units[] = {"data.train=t.bin", "model.n_layer=64", "parallel.pp=64", "train.global_batch=65536",
                                "train.micro_batch=1"};
    cr_expect_eq(tri_config_load(&c, NULL, 5, most_units), 0, "64 x 65536 = 2^22 units");
}

Test(config, cross_field_rules) {
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"n_embd\": 130, \"n_head\": 4}}", "model.n_embd", "130",
                 "model.n_head", "4");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"global_batch\": 10, "
                 "\"micro_batch\": 4}}",
                 "train.global_batch", "10", "train.micro_batch", "4");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"train\": {\"lr\": 0.001, \"min_lr\": 0.01}}", "train.min_lr", "0.01",
                 "train.lr", "0.001");
    /* equal is allowed; divisibility by tp or dp is not checked here */
    char path[256];
    write_tmp("{\"data\": {\"train\": \"x\"}, \"train\": {\"lr\": 0.001, \"min_lr\": 0.001},"
              " \"parallel\": {\"tp\": 3, \"dp\": 5}}",
              path);
    tri_config cfg;
    cr_expect_eq(tri_config_load(&cfg, path, 0, NULL), 0);
}

/* A [0, 1] int field is a switch: JSON and --set take true/false or 0/1; it
 * needs tp > 1 and a seq_len that tp divides, errors naming the numbers. */
Test(config, sequence_parallel_switch) {
    tri_config c;
    cr_assert_eq(tri_config_load_string(&c,
                                        "{\"data\": {\"train\": \"x\"}, \"model\": {\"seq_len\": 16},"
                                        " \"parallel\": {\"tp\": 4, \"sequence_parallel\": true}}",
                                        NULL),
                 0);
    cr_expect_eq(c.parallel.sequence_parallel, 1);
    cr_assert_eq(tri_config_load_string(
                     &c, "{\"data\": {\"train\": \"x\"}, \"parallel\": {\"sequence_parallel\": false}}", NULL),
                 0);
    cr_expect_eq(c.parallel.sequence_parallel, 0);
    cr_expect_eq(tri_config_load(&c, NULL, OVS("data.train=x", "parallel.tp=2", "parallel.sequence_parallel=true")), 0);
    cr_expect_eq(c.parallel.sequence_parallel, 1);
    cr_expect_eq(tri_config_load(&c, NULL, OVS("data.train=x", "parallel.tp=2", "parallel.sequence_parallel=0")), 0);
    cr_expect_eq(c.parallel.sequence_parallel, 0);
    /* other int fields take no booleans */
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"tp\": true}}", "parallel.tp", "true");
    EXPECT_SET_ERROR("parallel.tp=true", "parallel.tp", "true");
    EXPECT_SET_ERROR("parallel.sequence_parallel=yes", "parallel.sequence_parallel", "yes");
    EXPECT_SET_ERROR("parallel.sequence_parallel=2", "parallel.sequence_parallel", "2");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"parallel\": {\"sequence_parallel\": true}}",
                 "parallel.sequence_parallel", "parallel.tp > 1", "parallel.tp = 1");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"seq_len\": 10},"
                 " \"parallel\": {\"tp\": 4, \"sequence_parallel\": 1}}",
                 "model.seq_len (10)", "parallel.tp (4)");
}

/* model.arch: gpt2 by default, every Llama key at a default that means
 * "the arch's own"; Llama's impossible shapes refused naming the keys and
 * numbers; a Llama-only key away from its default on a gpt2 refused. */
Test(config, llama_keys) {
    tri_config c;
    cr_assert_eq(tri_config_load(&c, NULL, OVS("data.train=x")), 0);
    cr_expect(c.model.arch == TRI_ARCH_GPT2 && c.model.n_kv_head == 0 && c.model.ffn_hidden == 0 &&
              c.model.tie_embeddings == -1 && c.model.norm_eps == 1e-5 && c.model.rope_theta == 10000 &&
              c.model.rope_scaling_factor == 0);
    cr_expect(tri_model_tied(&c.model));
    cr_assert_eq(tri_config_load_string(&c,
                                        "{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"llama\", "
                                        "\"n_head\": 8, \"n_embd\": 128, \"n_kv_head\": 2, \"tie_embeddings\": false, "
                                        "\"rope_theta\": 500000, \"rope_scaling_factor\": 8}, \"parallel\": {\"tp\": 4}}",
                                        NULL),
                 0);
    cr_expect(c.model.arch == TRI_ARCH_LLAMA && c.model.n_kv_head == 2 && c.model.tie_embeddings == 0 &&
              c.model.rope_theta == 500000 && !tri_model_tied(&c.model));
    cr_expect_eq(tri_model_ffn_hidden(&c.model), 512);
    cr_expect_eq(tri_config_load(&c, NULL, OVS("data.train=x", "model.arch=llama", "model.tie_embeddings=true")), 0);
    cr_expect(tri_model_tied(&c.model));
    cr_expect_eq(tri_config_load(&c, NULL, OVS("data.train=x", "model.arch=llama")), 0);
    cr_expect(!tri_model_tied(&c.model) && tri_model_n_kv_head(&c.model) == 4);
    /* Llama's shapes */
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"llama\", \"n_head\": 6, "
                 "\"n_embd\": 48, \"n_kv_head\": 4}}",
                 "model.n_head (6)", "model.n_kv_head (4)");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"llama\", \"n_head\": 4, "
                 "\"n_embd\": 36}}",
                 "head size 9", "odd", "RoPE");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"llama\", \"n_head\": 6, "
                 "\"n_embd\": 48, \"n_kv_head\": 3}, \"parallel\": {\"tp\": 2}}",
                 "model.n_kv_head (3)", "parallel.tp (2)");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"llama\", \"ffn_hidden\": 66}, "
                 "\"parallel\": {\"tp\": 4}}",
                 "model.ffn_hidden (66)", "parallel.tp (4)");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"llama\", \"rope_scaling_factor\": 8, "
                 "\"rope_low_freq_factor\": 4, \"rope_high_freq_factor\": 1}}",
                 "model.rope_high_freq_factor (1)", "model.rope_low_freq_factor (4)");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"arch\": \"gemma\"}}", "model.arch", "gemma",
                 "gpt2|llama");
    EXPECT_SET_ERROR("model.tie_embeddings=2", "model.tie_embeddings", "2");
    /* Llama's keys on a gpt2 */
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"n_kv_head\": 2}}", "model.n_kv_head = 2",
                 "model.arch");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"ffn_hidden\": 100}}", "model.ffn_hidden = 100");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"tie_embeddings\": false}}",
                 "model.tie_embeddings = false");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"model\": {\"rope_theta\": 500000}}", "model.rope_theta = 500000");
    /* n_kv_head = n_head and tie_embeddings true say what GPT-2 is anyway */
    cr_expect_eq(tri_config_load(&c, NULL, OVS("data.train=x", "model.n_kv_head=4", "model.tie_embeddings=true")), 0);
}

Test(config, required_train_path) {
    EXPECT_ERROR("{}", "data.train", "required");
    EXPECT_ERROR("{\"data\": {\"train\": \"\", \"val\": \"v.bin\"}}", "data.train", "required");
}

Test(config, missing_file) {
    char path[300];
    snprintf(path, sizeof path, "%s/does-not-exist.json", tmpdir);
    tri_config cfg;
    capture c;
    capture_begin(&c);
    int rc = tri_config_load(&cfg, path, 0, NULL);
    char *err = capture_end(&c);
    cr_expect_eq(rc, -1);
    /* src/base/file.h names the file's role: "trident: config PATH: ..." */
    char want[600];
    snprintf(want, sizeof want, "trident: config %s: cannot open: No such file or directory\n", path);
    cr_expect_str_eq(err, want);
    free(err);
}

Test(config, json_syntax_errors) {
    /* the stray comma is on line 3 */
    EXPECT_ERROR("{\n  \"data\": {\"train\": \"x\"},\n  \"train\": {\"lr\": 1,}\n}", "syntax", "line 3");
    /* trailing garbage after the object: byte 3, line 1, column 4 */
    EXPECT_ERROR("{} x", "syntax", "line 1", "column 4", "byte 3");
    EXPECT_ERROR("", "syntax", "byte 0");
    EXPECT_ERROR("{\"train\": {\"lr\": 1e-3", "syntax");
    EXPECT_ERROR("{\"train\" {}}", "syntax", "line 1");
}

Test(config, duplicate_keys) {
    EXPECT_ERROR("{\"data\": {\"train\": \"x\", \"train\": \"y\"}}", "data.train", "twice");
    EXPECT_ERROR("{\"data\": {\"train\": \"x\"}, \"data\": {\"val\": \"y\"}}", "data", "twice");
}

/* Choices are enums, parsed from their names once, at load: each name gives
 * its enum value (written out here, not through the parser), and a bad name
 * in the file is still fixed by a later --set, as for every other field. */
Test(config, choices_are_enums_parsed_at_load) {
    char path[256];
    write_tmp("{\"device\": \"cuda\", \"data\": {\"train\": \"t.bin\"},"
              " \"train\": {\"recompute\": \"selective\", \"precision\": \"fp16\"},"
              " \"parallel\": {\"schedule\": \"zb-h1\"}, \"checkpoint\": {\"dtype\": \"bf16\"}}",
              path);
    tri_config c;
    cr_assert_eq(tri_config_load(&c, path, 0, NULL), 0);
    cr_expect_eq(c.device, TRI_DEVICE_CUDA);
    cr_expect_eq(c.train.recompute, TRI_RECOMPUTE_SELECTIVE);
    cr_expect_eq(c.train.precision, TRI_F16);
    cr_expect_eq(c.parallel.schedule, TRI_SCHED_ZBH1);
    cr_expect_eq(c.checkpoint.dtype, TRI_BF16);
    cr_assert_eq(tri_config_load(&c, path,
                                 OVS("train.recompute=full", "parallel.schedule=gpipe", "train.precision=bf16",
                                     "parallel.schedule=interleaved")),
                 0);
    cr_expect_eq(c.train.recompute, TRI_RECOMPUTE_FULL);
    cr_expect_eq(c.train.precision, TRI_BF16);
    cr_expect_eq(c.parallel.schedule, TRI_SCHED_INTERLEAVED, "the later override wins");
    /* the names go back out as they came in */
    char *json = tri_config_to_json(&c);
    cr_assert_not_null(strstr(json, "\"recompute\":\t\"full\""), "%s", json);
    cr_assert_not_null(strstr(json, "\"schedule\":\t\"interleaved\""), "%s", json);
    cr_assert_not_null(strstr(json, "\"precision\":\t\"bf16\""), "%s", json);
    free(json);
    /* a name that is no choice, fixed by an override, and not fixed */
    write_tmp("{\"data\": {\"train\": \"t.bin\"}, \"train\": {\"recompute\": \"partial\"}}", path);
    cr_assert_eq(tri_config_load(&c, path, OVS("train.recompute=none")), 0);
    cr_expect_eq(c.train.recompute, TRI_RECOMPUTE_NONE);
    EXPECT_ERROR("{\"data\": {\"train\": \"t.bin\"}, \"train\": {\"recompute\": \"partial\"}}",
                 "train.recompute: \"partial\" is not one of none|selective|full");
    EXPECT_ERROR("{\"data\": {\"train\": \"t.bin\"}, \"train\": {\"precision\": \"\"}}",
                 "train.precision: required, got an empty string");
    EXPECT_SET_ERROR("parallel.schedule=1f1b-interleaved", "parallel.schedule: longer than 15 bytes (16)");
}

Test(config, too_long_string) {
    char *json = malloc(TRI_PATH_MAX + 64);
    cr_assert_not_null(json);
    int n = snprintf(json, 64, "{\"data\": {\"train\": \"");
    memset(json + n, 'a', TRI_PATH_MAX); /* one more than fits with the NUL */
    strcpy(json + n + TRI_PATH_MAX, "\"}}");
    EXPECT_ERROR(json, "data.train", "1023", "1024");
    free(json);
}

Test(config, seed_errors) {
    /* above 2^53 a JSON number cannot be trusted: must be a string */
    EXPECT_ERROR("{\"train\": {\"seed\": 1e19}}", "train.seed", "string", "1e+19");
    EXPECT_ERROR("{\"train\": {\"seed\": -1}}", "train.seed", "got -1");
    EXPECT_ERROR("{\"train\": {\"seed\": \"abc\"}}", "train.seed", "\"abc\"");
    EXPECT_ERROR("{\"train\": {\"seed\": \"-1\"}}", "train.seed", "\"-1\"");
    EXPECT_ERROR("{\"train\": {\"seed\": \"18446744073709551616\"}}", "train.seed", "18446744073709551616");
    EXPECT_ERROR("{\"train\": {\"seed\": \"12 \"}}", "train.seed", "\"12 \"");
}

Test(config, override_errors) {
    EXPECT_SET_ERROR("train.lr", "--set train.lr", "section.key=value");
    EXPECT_SET_ERROR("train.lrr=0.1", "--set train.lrr", "unknown key");
    EXPECT_SET_ERROR("lr=0.1", "--set lr", "unknown key");
    EXPECT_SET_ERROR("trainn.lr=0.1", "--set trainn.lr", "unknown key");
    EXPECT_SET_ERROR("train.lr=abc", "--set train.lr", "expected a number", "'abc'");
    EXPECT_SET_ERROR("train.lr=", "--set train.lr", "expected a number", "''");
    EXPECT_SET_ERROR("train.lr=0.1x", "--set train.lr", "'0.1x'");
    EXPECT_SET_ERROR("train.lr= 0.1", "--set train.lr", "' 0.1'");
    EXPECT_SET_ERROR("train.lr=nan", "--set train.lr", "finite");
    EXPECT_SET_ERROR("train.lr=inf", "--set train.lr", "finite");
    EXPECT_SET_ERROR("train.steps=1.5", "--set train.steps", "expected an integer, got 1.5");
    EXPECT_SET_ERROR("train.steps=12x", "--set train.steps", "'12x'");
    EXPECT_SET_ERROR("train.steps=99999999999", "--set train.steps", "99999999999");
    EXPECT_SET_ERROR("train.seed=-1", "--set train.seed", "'-1'");
    EXPECT_SET_ERROR("train.seed=18446744073709551616", "--set train.seed", "18446744073709551616");
    EXPECT_SET_ERROR("train.seed=1.5", "--set train.seed", "'1.5'");
    /* an override out of range is caught by validation, naming the key */
    EXPECT_SET_ERROR("train.beta2=1", "train.beta2", "[0, 1)", "got 1");
    /* a word outside its field's choices names them */
    EXPECT_SET_ERROR("train.recompute=partial", "train.recompute", "\"partial\"", "none|selective|full");
    EXPECT_SET_ERROR("train.precision=fp8", "train.precision", "\"fp8\"", "fp32|bf16|fp16");
    EXPECT_SET_ERROR("checkpoint.dtype=f32", "checkpoint.dtype", "\"f32\"", "fp32|bf16|fp16");
    EXPECT_SET_ERROR("train.loss_scale_init=0.5", "train.loss_scale_init");
    EXPECT_SET_ERROR("train.loss_scale_window=0", "train.loss_scale_window");
    /* 1e308 skipped every step while it halved (issue 22): at most 2^32 */
    EXPECT_SET_ERROR("train.loss_scale_init=1e308", "train.loss_scale_init", "4294967296", "got 1e+308");
    EXPECT_SET_ERROR("train.spike_factor=1", "train.spike_factor");
    EXPECT_SET_ERROR("train.max_bad_steps=-1", "train.max_bad_steps");
    EXPECT_SET_ERROR("debug.inject_kind=boom", "debug.inject_kind", "nan-grad|inf-grad|nan-loss|spike");
    EXPECT_SET_ERROR("parallel.offload=cpu", "parallel.offload", "none|optimizer");
    /* the error stops at the first bad override */
    expect_error_ov("{\"data\": {\"train\": \"t.bin\"}}", OVS("train.lr=0.01", "model.n_layerz=3", "train.lr=oops"),
                    NEEDLES("model.n_layerz", "unknown key"));
}

Test(config, load_string_names_its_source) {
    tri_config cfg;
    capture c;
    capture_begin(&c);
    int rc = tri_config_load_string(&cfg, "{\"train\": {\"lrr\": 1}}", "run/state.json");
    char *err = capture_end(&c);
    cr_expect_eq(rc, -1);
    cr_expect_str_eq(err, "trident: run/state.json: train.lrr: unknown key\n");
    free(err);
}

/* ------------------------------------------------------------------------ */
/* Defaults, overrides, shipped configs                                     */

/* The defaults of the specification, written out member by member. */
static void check_defaults_except_data(const tri_config *c) {
    cr_expect_eq(c->model.n_layer, 4);
    cr_expect_eq(c->model.n_head, 4);
    cr_expect_eq(c->model.n_embd, 128);
    cr_expect_eq(c->model.seq_len, 128);
    cr_expect_eq(c->model.vocab_size, 256);
    cr_expect_eq(c->train.global_batch, 16);
    cr_expect_eq(c->train.micro_batch, 4);
    cr_expect_eq(c->train.steps, 100);
    cr_expect(c->train.lr == 1e-3);
    cr_expect(c->train.min_lr == 1e-4);
    cr_expect_eq(c->train.warmup_steps, 10);
    cr_expect(c->train.weight_decay == 0.1);
    cr_expect(c->train.grad_clip == 1.0);
    cr_expect(c->train.beta1 == 0.9);
    cr_expect(c->train.beta2 == 0.95);
    cr_expect(c->train.eps == 1e-8);
    cr_expect(c->train.seed == 1337u);
    cr_expect_eq(c->train.eval_every, 0);
    cr_expect_eq(c->train.eval_batches, 4);
    cr_expect(c->data.split == 0.0);
    cr_expect_eq(c->parallel.tp, 1);
    cr_expect_eq(c->parallel.pp, 1);
    cr_expect_eq(c->parallel.dp, 1);
    cr_expect(c->parallel.bucket_mb == 25.0);
    cr_expect(c->parallel.timeout_s == 600.0);
    cr_expect_eq(c->parallel.zero, 0);
    cr_expect_eq(c->parallel.zero_keep_params, 0);
    cr_expect_eq(c->parallel.offload, TRI_OFFLOAD_NONE);
    cr_expect_eq(c->parallel.cp, 1);
    cr_expect_str_eq(c->checkpoint.dir, "checkpoints");
    cr_expect_eq(c->checkpoint.every, 0);
    cr_expect_eq(c->checkpoint.keep, 0);
    cr_expect_eq(c->log.every, 1);
    cr_expect_str_eq(c->log.dir, "logs");
    cr_expect(c->log.peak_gflops == 300.0);
    cr_expect_eq(c->log.plot, 0);
    cr_expect_eq(c->log.tensorboard, 0);
    cr_expect_eq(c->debug.fail_step, -1);
    cr_expect_eq(c->debug.fail_rank, -1);
}

Test(config, defaults) {
    tri_config c;
    memset(&c, 0x77, sizeof c);
    tri_config_defaults(&c);
    check_defaults_except_data(&c);
    cr_expect_str_eq(c.data.train, "");
    cr_expect_str_eq(c.data.val, "");
    cr_expect_str_eq(c.data.tokenizer, "");
}

Test(config, minimal_file_gives_defaults) {
    char path[256];
    write_tmp("{\"data\": {\"train\": \"tokens.bin\"}}", path);
    tri_config c;
    cr_assert_eq(tri_config_load(&c, path, 0, NULL), 0);
    check_defaults_except_data(&c);
    cr_expect_str_eq(c.data.train, "tokens.bin");
    cr_expect_str_eq(c.data.val, "");
    cr_expect_str_eq(c.data.tokenizer, "");
    cr_expect_str_eq(c.source, path);
    /* with a UTF-8 byte-order mark and an empty section */
    write_tmp("\xEF\xBB\xBF{\"model\": {}, \"data\": {\"train\": \"t\"}}", path);
    cr_expect_eq(tri_config_load(&c, path, 0, NULL), 0);
}

Test(config, overrides_win_over_the_file) {
    char path[256];
    write_tmp("{\"data\": {\"train\": \"a.bin\", \"val\": \"v.bin\"},"
              " \"train\": {\"lr\": 0.002, \"steps\": -5, \"seed\": 7},"
              " \"model\": {\"n_layer\": 6}}",
              path);
    tri_config c;
    /* the file's invalid steps is fixed by an override: validation runs last */
    cr_assert_eq(tri_config_load(&c, path,
                                 OVS("train.lr=3e-3", "train.steps=5", "train.lr=0.004", "data.train=b=c.bin",
                                     "train.seed=18446744073709551615", "model.n_embd=1e2", "model.n_head=5",
                                     "checkpoint.dir=", "log.peak_gflops=12.5")),
                 0);
    cr_expect(c.train.lr == 0.004, "later override wins: %.17g", c.train.lr);
    cr_expect_eq(c.train.steps, 5);
    cr_expect_str_eq(c.data.train, "b=c.bin"); /* value taken verbatim after the first '=' */
    cr_expect_str_eq(c.data.val, "v.bin");     /* untouched file value */
    cr_expect(c.train.seed == UINT64_MAX);
    cr_expect_eq(c.model.n_layer, 6);
    cr_expect_eq(c.model.n_embd, 100);
    cr_expect_eq(c.model.n_head, 5);
    cr_expect_str_eq(c.checkpoint.dir, "");
    cr_expect(c.log.peak_gflops == 12.5);
    /* no file at all: defaults plus overrides */
    cr_assert_eq(tri_config_load(&c, NULL, OVS("data.train=x.bin")), 0);
    cr_expect_str_eq(c.data.train, "x.bin");
    check_defaults_except_data(&c);
}

Test(config, seed_forms) {
    tri_config c;
    cr_assert_eq(
        tri_config_load_string(&c, "{\"data\": {\"train\": \"x\"}, \"train\": {\"seed\": 9007199254740992}}", "s"), 0);
    cr_expect(c.train.seed == ((uint64_t)1 << 53));
    cr_assert_eq(tri_config_load_string(&c,
                                        "{\"data\": {\"train\": \"x\"}, \"train\": {\"seed\": "
                                        "\"18446744073709551615\"}}",
                                        "s"),
                 0);
    cr_expect(c.train.seed == UINT64_MAX);
    cr_assert_eq(tri_config_load_string(&c, "{\"data\": {\"train\": \"x\"}, \"train\": {\"seed\": \"0\"}}", "s"), 0);
    cr_expect(c.train.seed == 0);
}

/* The quickstart runs this config under tridentrun at tp=2, dp=2 with a BPE
 * tokenizer: it must load and divide that way. */
Test(config, quickstart_config_loads_and_fits_the_quickstart_layout) {
    tri_config c;
    cr_assert_eq(tri_config_load(&c, TRI_SOURCE_DIR "/configs/quickstart.json", 0, NULL), 0);
    cr_expect_eq(c.model.n_head % 2, 0, "n_head %d must divide by tp = 2", c.model.n_head);
    cr_expect_eq(c.train.global_batch % (c.train.micro_batch * 2), 0, "global_batch %d by micro_batch %d x dp 2",
                 c.train.global_batch, c.train.micro_batch);
    cr_expect(c.data.tokenizer[0] != 0, "the quickstart samples words through a BPE tokenizer");
    cr_expect(c.model.vocab_size > 256, "a BPE vocabulary, not bytes: %d", c.model.vocab_size);
    cr_expect(c.train.eval_every > 0 && c.data.val[0] != 0, "the quickstart shows a validation loss");
}

Test(config, tiny_test_config_loads) {
    tri_config c;
    cr_assert_eq(tri_config_load(&c, TRI_SOURCE_DIR "/configs/tiny-test.json", 0, NULL), 0);
    cr_expect_eq(c.model.n_layer, 2);
    cr_expect_eq(c.model.n_head, 2);
    cr_expect_eq(c.model.n_embd, 32);
    cr_expect_eq(c.model.seq_len, 16);
    cr_expect_eq(c.model.vocab_size, 256);
    cr_expect_eq(c.train.global_batch, 8);
    cr_expect_eq(c.train.micro_batch, 2);
    cr_expect_eq(c.train.steps, 10);
    cr_expect(c.train.lr == 1e-3);
    cr_expect(c.train.min_lr == 1e-4);
    cr_expect_eq(c.train.warmup_steps, 2);
    cr_expect_str_eq(c.data.train, "data/kjv/train.bin");
    cr_expect_str_eq(c.data.val, "data/kjv/val.bin");
    cr_expect_str_eq(c.checkpoint.dir, "runs/tiny/ckpt");
    cr_expect_str_eq(c.log.dir, "runs/tiny");
    cr_expect_eq(c.parallel.tp, 1); /* not in the file: default */
}

/* ------------------------------------------------------------------------ */
/* Round trip, print, help                                                  */

/* Every member, by hand; doubles compared bit for bit. */
static void expect_same(const tri_config *a, const tri_config *b) {
#define SAME_I(m) cr_expect_eq(a->m, b->m, #m ": %d vs %d", a->m, b->m)
#define SAME_D(m) cr_expect(memcmp(&a->m, &b->m, sizeof(double)) == 0, #m ": %.17g vs %.17g", a->m, b->m)
#define SAME_S(m) cr_expect_str_eq(a->m, b->m, #m)
    SAME_I(model.n_layer);
    SAME_I(model.n_head);
    SAME_I(model.n_embd);
    SAME_I(model.seq_len);
    SAME_I(model.vocab_size);
    SAME_I(train.global_batch);
    SAME_I(train.micro_batch);
    SAME_I(train.steps);
    SAME_D(train.lr);
    SAME_D(train.min_lr);
    SAME_I(train.warmup_steps);
    SAME_D(train.weight_decay);
    SAME_D(train.grad_clip);
    SAME_D(train.beta1);
    SAME_D(train.beta2);
    SAME_D(train.eps);
    cr_expect(a->train.seed == b->train.seed, "seed: %llu vs %llu", (unsigned long long)a->train.seed,
              (unsigned long long)b->train.seed);
    SAME_I(train.eval_every);
    SAME_I(train.eval_batches);
    SAME_S(data.train);
    SAME_S(data.val);
    SAME_S(data.tokenizer);
    SAME_D(data.split);
    SAME_I(parallel.tp);
    SAME_I(parallel.pp);
    SAME_I(parallel.dp);
    SAME_D(parallel.bucket_mb);
    SAME_D(parallel.timeout_s);
    SAME_I(parallel.sequence_parallel);
    SAME_I(parallel.zero);
    SAME_I(parallel.zero_keep_params);
    SAME_I(parallel.zero_unit_layers);
    SAME_I(parallel.offload);
    SAME_I(parallel.cp);
    SAME_S(checkpoint.dir);
    SAME_I(checkpoint.every);
    SAME_I(checkpoint.keep);
    SAME_I(log.every);
    SAME_S(log.dir);
    SAME_D(log.peak_gflops);
    SAME_I(log.plot);
    SAME_I(log.tensorboard);
    SAME_I(debug.fail_step);
    SAME_I(debug.fail_rank);
#undef SAME_I
#undef SAME_D
#undef SAME_S
}

/* A valid config in which every member differs from its default, with
 * doubles that a 15-digit printer would not give back. */
static void unusual_config(tri_config *c, uint64_t seed) {
    tri_config_defaults(c);
    c->model.n_layer = 7;
    c->model.n_head = 3;
    c->model.n_embd = 96;
    c->model.seq_len = 33;
    c->model.vocab_size = 2147483647;
    c->train.global_batch = 30;
    c->train.micro_batch = 5;
    c->train.steps = 0;
    c->train.lr = nextafter(0.1, 1.0); /* 0.1 plus one ulp */
    c->train.min_lr = 1.0 / 3.0 * 1e-3;
    c->train.warmup_steps = 123456;
    c->train.weight_decay = 0.0;
    c->train.grad_clip = 1e-300;
    c->train.beta1 = nextafter(1.0, 0.0); /* the largest double below 1 */
    c->train.beta2 = 0.0;
    c->train.eps = 4.9406564584124654e-324; /* the smallest subnormal */
    c->train.seed = seed;
    c->train.eval_every = 17;
    c->train.eval_batches = 1;
    snprintf(c->data.train, sizeof c->data.train, "dir with space/\"quoted\"\\back\tslash.bin");
    snprintf(c->data.val, sizeof c->data.val, "val\nnewline-\xC3\xA9t\xC3\xA9.bin");
    snprintf(c->data.tokenizer, sizeof c->data.tokenizer, "tok/tokenizer.json");
    c->data.split = 0.0625;
    c->parallel.tp = 3; /* divides seq_len 33, as sequence_parallel below needs */
    c->parallel.pp = 4;
    c->parallel.dp = 3;
    c->parallel.bucket_mb = 0.0625;
    c->parallel.timeout_s = 0.0; /* no deadline */
    c->parallel.sequence_parallel = 1;
    c->parallel.zero = 3;
    c->parallel.zero_keep_params = 1;
    c->parallel.zero_unit_layers = 3;
    c->parallel.offload = TRI_OFFLOAD_OPTIMIZER;
    /* parallel.cp stays 1: seq_len 33 is a multiple of no 2 x cp > 1 */
    snprintf(c->checkpoint.dir, sizeof c->checkpoint.dir, "%s", "");
    c->checkpoint.every = 1000000;
    c->checkpoint.keep = 9;
    c->log.every = 2147483647;
    snprintf(c->log.dir, sizeof c->log.dir, "/abs/log");
    c->log.peak_gflops = 1.2345678901234567e15;
    c->log.plot = 1;
    c->log.tensorboard = 1;
    c->debug.fail_step = 5;
    c->debug.fail_rank = 0;
}

Test(config, to_json_round_trips_exactly) {
    const uint64_t seeds[] = {UINT64_MAX, ((uint64_t)1 << 53) + 1, 0, 42};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        tri_config a, b;
        unusual_config(&a, seeds[i]);
        snprintf(a.source, sizeof a.source, "state.json");
        char *json = tri_config_to_json(&a);
        cr_assert_not_null(json);
        memset(&b, 0x33, sizeof b);
        cr_assert_eq(tri_config_load_string(&b, json, "state.json"), 0, "%s", json);
        expect_same(&a, &b);
        cr_expect_str_eq(b.source, "state.json");
        /* and the text is stable: dump of the reloaded config is the same */
        char *json2 = tri_config_to_json(&b);
        cr_assert_not_null(json2);
        cr_expect_str_eq(json, json2);
        free(json);
        free(json2);
    }
}

/* "section.key" names (and "device") of the JSON that to_json writes (parsed by cJSON here,
 * not by the config code). Returns how many; names[i] malloc'd. */
static int json_keys(const tri_config *c, char names[][64], int max) {
    char *json = tri_config_to_json(c);
    cr_assert_not_null(json);
    cJSON *root = cJSON_Parse(json);
    cr_assert_not_null(root, "to_json wrote invalid JSON:\n%s", json);
    int n = 0;
    for (cJSON *s = root->child; s != NULL; s = s->next) {
        if (!strcmp(s->string, "device")) { /* the one top-level key */
            cr_assert(cJSON_IsString(s), "device is not a string");
            cr_assert_lt(n, max);
            snprintf(names[n++], 64, "device");
            continue;
        }
        cr_assert(cJSON_IsObject(s), "%s is not an object", s->string);
        for (cJSON *k = s->child; k != NULL; k = k->next) {
            cr_assert_lt(n, max);
            snprintf(names[n++], 64, "%s.%s", s->string, k->string);
        }
    }
    cJSON_Delete(root);
    free(json);
    return n;
}

/* Lines of `text` whose first word (after blanks) is exactly `word`. */
static int lines_starting_with(const char *text, const char *word) {
    int count = 0;
    size_t wl = strlen(word);
    for (const char *line = text; *line != '\0';) {
        const char *p = line;
        while (*p == ' ') p++;
        if (strncmp(p, word, wl) == 0 && (p[wl] == ' ' || p[wl] == '\n')) count++;
        const char *nl = strchr(line, '\n');
        if (nl == NULL) break;
        line = nl + 1;
    }
    return count;
}

static char *capture_stream(void (*write)(const tri_config *, FILE *), const tri_config *c) {
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    cr_assert_not_null(f);
    write(c, f);
    cr_assert_eq(fclose(f), 0);
    return buf;
}

static void help_adapter(const tri_config *c, FILE *f) {
    (void)c;
    tri_config_help(f);
}

Test(config, help_lists_every_key) {
    tri_config c;
    tri_config_defaults(&c);
    char names[128][64];
    int n = json_keys(&c, names, 128);
    cr_expect_eq(n, N_CONFIG_FIELDS, "to_json wrote %d keys, the struct has %d", n, N_CONFIG_FIELDS);
    char *help = capture_stream(help_adapter, &c);
    int total = 0;
    for (int i = 0; i < n; i++) {
        int k = lines_starting_with(help, names[i]);
        cr_expect_eq(k, 1, "help has %d lines for %s", k, names[i]);
        total += k;
    }
    cr_expect_eq(total, n, "help has %d lines for the %d keys", total, n);
    /* no line for a key that to_json does not write: count lines whose
     * first word looks like section.key (or is device) */
    int keyish = 0;
    for (const char *line = help; *line != '\0';) {
        const char *p = line;
        while (*p == ' ') p++;
        const char *sp = strpbrk(p, " \n");
        const char *dot = strchr(p, '.');
        if (sp != NULL && dot != NULL && dot < sp && p[0] >= 'a' && p[0] <= 'z') keyish++;
        if (!strncmp(p, "device ", 7)) keyish++; /* the top-level key */
        const char *nl = strchr(line, '\n');
        if (nl == NULL) break;
        line = nl + 1;
    }
    cr_expect_eq(keyish, n, "help has %d key lines, JSON has %d keys", keyish, n);
    /* a range and a help text make it to the line: spot checks */
    cr_expect_not_null(strstr(help, "[0, 1)"));
    cr_expect_not_null(strstr(help, "[2, 2147483648)"));
    free(help);
}

static void print_adapter(const tri_config *c, FILE *f) { tri_config_print(c, f); }

Test(config, print_echoes_every_field) {
    tri_config c;
    cr_assert_eq(tri_config_load(&c, TRI_SOURCE_DIR "/configs/tiny-test.json", 0, NULL), 0);
    char names[128][64];
    int n = json_keys(&c, names, 128);
    char *out = capture_stream(print_adapter, &c);
    int lines = 0;
    for (const char *p = out; *p != '\0'; p++) lines += *p == '\n';
    cr_expect_eq(lines, n);
    for (int i = 0; i < n; i++) cr_expect_eq(lines_starting_with(out, names[i]), 1, "print lacks %s", names[i]);
    cr_expect_not_null(strstr(out, "train.lr = 0.001\n"), "%s", out);
    cr_expect_not_null(strstr(out, "train.seed = 1337\n"));
    cr_expect_not_null(strstr(out, "model.n_embd = 32\n"));
    cr_expect_not_null(strstr(out, "data.train = \"data/kjv/train.bin\"\n"));
    free(out);
}
