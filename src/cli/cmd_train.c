/* `trident train CONFIG [--set section.key=value]... [--resume | --init-from DIR] [--threads N] [--device D]`:
 * the options, the config, then the trainer (src/train/train.h). */
#include <stdio.h>
#include <stdlib.h>

#include "base/exit.h"
#include "base/err.h"
#include "base/str.h"
#include "cli/cli.h"
#include "config/config.h"
#include "train/train.h"

int tri_cmd_train(int argc, char **argv) {
    tri_opt_list sets = {0}, pos = {0};
    tri_run_opts opts = {0};
    const char *device = NULL;
    int print_only = 0;
    const tri_opt table[] = {
        {"--set", TRI_OPT_LIST, &sets, "section.key=value",
         .help = "override a config field (repeatable; see `trident config-help`)"},
        {"--resume", TRI_OPT_FLAG, &opts.resume,
         .help = "continue from the newest complete checkpoint in checkpoint.dir, verified\n"
                 "(from scratch if there is none)"},
        {"--init-from", TRI_OPT_STR, &opts.init_from, "DIR",
         .help = "start from the weights of a Hugging Face Llama or GPT-2 directory (config.json and\n"
                 "model.safetensors, or shards with model.safetensors.index.json) at step 0 with a\n"
                 "fresh optimizer; every shape is checked against the config"},
        {"--threads", TRI_OPT_INT, &opts.threads, "N", 1, 1024,
         .help = "OpenMP/OpenBLAS threads per rank (default: OMP_NUM_THREADS or all cores)"},
        {"--device", TRI_OPT_STR, &device, "cpu|cpu-guard|cuda",
         .help = "compute backend (default: the config's \"device\", cpu; cpu-guard: a test mode that faults on\n"
                 "host access to backend memory)"},
        {"--stop-at-step", TRI_OPT_INT, &opts.stop_at, "N", 1, 1 << 30,
         .help = "save a checkpoint and stop after step N (resume with --resume)"},
        {"--allow-data-change", TRI_OPT_FLAG, &opts.allow_data_change,
         .help = "with --resume: continue even if a data file's size or fingerprint\n"
                 "differs from the one the checkpoint's run read (state.json)"},
        {"--skip-memory-check", TRI_OPT_FLAG, &opts.skip_memory_check,
         .help = "start even if this rank's memory estimate exceeds the memory\n"
                 "available (MemAvailable, cgroup limit)"},
        {"--print-config", TRI_OPT_FLAG, &print_only, .help = "print the resolved config and exit"},
    };
    const tri_cmd_spec spec = {.cmd = "trident train",
                               .who = "train",
                               .usage = "CONFIG [options]",
                               .opts = table,
                               .n_opts = TRI_OPT_N(table),
                               .pos = &pos,
                               .max_pos = 1,
                               .pos_name = "CONFIG"};
    int rc = tri_opt_parse(&spec, argc, argv);
    if (rc != TRI_OPT_GO) {
        rc = tri_opt_exit(rc);
        goto out;
    }
    rc = TRI_EXIT_BAD_INPUT;
    if (opts.init_from && opts.resume) {
        tri_error("train: --init-from starts a new run and --resume continues one: pass one of them");
        goto out;
    }
    if (pos.n == 0) {
        tri_error("train: missing CONFIG (a JSON file, e.g. configs/quickstart.json)");
        goto out;
    }
    /* --device is the config's top-level "device", applied after every --set */
    const char **overrides = tri_xcalloc((size_t)sets.n + 1, sizeof *overrides);
    int n = 0;
    for (int i = 0; i < sets.n; i++) overrides[n++] = sets.v[i];
    char *device_set = device ? tri_xprintf("device=%s", device) : NULL;
    if (device_set) overrides[n++] = device_set;
    tri_config cfg;
    int loaded = tri_config_load(&cfg, pos.v[0], n, overrides);
    free(overrides);
    free(device_set);
    if (loaded != 0) goto out;
    opts.device = cfg.device;
    if (print_only) {
        tri_config_print(&cfg, stdout);
        rc = TRI_EXIT_OK;
        goto out;
    }
    rc = tri_train(&cfg, &opts);
out:
    tri_opt_list_free(&sets);
    tri_opt_list_free(&pos);
    return rc;
}
