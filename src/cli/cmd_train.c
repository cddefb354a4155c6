/* `trident train CONFIG [--set section.key=value]... [--resume] [--threads N] [--device D]` */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "config/config.h"
#include "train/train.h"
#include "base/err.h"

static void train_usage(FILE *f) {
    fprintf(f, "usage: trident train CONFIG [options]\n"
               "  --set section.key=value   override a config field (repeatable; see `trident config-help`)\n"
               "  --resume                  continue from the newest complete checkpoint in checkpoint.dir, verified\n"
               "                            (from scratch if there is none)\n"
               "  --threads N               OpenMP/OpenBLAS threads per rank (default: OMP_NUM_THREADS or all cores)\n"
               "  --device cpu|cpu-guard|cuda  compute backend (default: the config's \"device\", cpu; cpu-guard: a "
               "test mode that faults on "
               "host access to backend memory)\n"
               "  --stop-at-step N          save a checkpoint and stop after step N (resume with --resume)\n"
               "  --allow-data-change       with --resume: continue even if a data file's size or fingerprint\n"
               "                            differs from the one the checkpoint's run read (state.json)\n"
               "  --skip-memory-check       start even if this rank's memory estimate exceeds the memory\n"
               "                            available (MemAvailable, cgroup limit)\n"
               "  --print-config            print the resolved config and exit\n");
}

int tri_cmd_train(int argc, char **argv) {
    const char *path = NULL;
    const char **sets = calloc((size_t)argc, sizeof *sets);
    int n_sets = 0, print_only = 0, rc = 2;
    tri_run_opts opts = {0};
    char device_set[64] = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            train_usage(stdout);
            rc = 0;
            goto out;
        } else if (!strcmp(a, "--set") && i + 1 < argc) {
            sets[n_sets++] = argv[++i];
        } else if (!strncmp(a, "--set=", 6)) {
            sets[n_sets++] = a + 6;
        } else if (!strcmp(a, "--resume")) {
            opts.resume = 1;
        } else if (!strcmp(a, "--allow-data-change")) {
            opts.allow_data_change = 1;
        } else if (!strcmp(a, "--skip-memory-check")) {
            opts.skip_memory_check = 1;
        } else if (!strcmp(a, "--print-config")) {
            print_only = 1;
        } else if (!strcmp(a, "--threads") && i + 1 < argc) {
            long v;
            if (tri_arg_int("--threads", argv[++i], 1, 1024, &v) != 0) goto out;
            opts.threads = (int)v;
        } else if (!strcmp(a, "--stop-at-step") && i + 1 < argc) {
            long v;
            if (tri_arg_int("--stop-at-step", argv[++i], 1, 1L << 30, &v) != 0) goto out;
            opts.stop_at = (int)v;
        } else if (!strcmp(a, "--device") && i + 1 < argc) {
            /* the config's top-level "device", overridden after every --set */
            snprintf(device_set, sizeof device_set, "device=%s", argv[++i]);
        } else if (a[0] == '-') {
            tri_error("train: unknown or incomplete option '%s' (try `trident train --help`)", a);
            goto out;
        } else if (!path) {
            path = a;
        } else {
            tri_error("train: unexpected argument '%s' (one CONFIG only)", a);
            goto out;
        }
    }
    if (!path) {
        tri_error("train: missing CONFIG (a JSON file, e.g. configs/quickstart.json)");
        goto out;
    }
    if (device_set[0]) sets[n_sets++] = device_set;
    tri_config cfg;
    if (tri_config_load(&cfg, path, n_sets, sets) != 0) goto out;
    opts.device = cfg.device;
    if (print_only) {
        tri_config_print(&cfg, stdout);
        rc = 0;
        goto out;
    }
    rc = tri_train(&cfg, &opts);
out:
    free(sets);
    return rc;
}
