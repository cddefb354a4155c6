/* `trident eval --ckpt DIR --data FILE [--batches N] [--batch B] [--json]`:
 * the options, the checkpoint and the token file, then the pass
 * (src/train/eval.h), printed as a line or one JSON object. */
#include <math.h>
#include <stdio.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/log.h"
#include "cli/cli.h"
#include "data/sampler.h"
#include "train/eval.h"
#include "train/infer.h"
#include "train/train.h"

int tri_cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL;
    long batches = 20, batch = 4;
    int threads = 0, json = 0;
    const tri_opt table[] = {
        {"--ckpt", TRI_OPT_STR, &ckpt, "DIR", .help = "checkpoint root (its latest) or one step directory"},
        {"--data", TRI_OPT_STR, &data, "FILE", .help = "token file (llm.c .bin or Megatron .bin/.idx)"},
        {"--batches", TRI_OPT_LONG, &batches, "N", 1, 1 << 30,
         .help = "batches to evaluate (default 20), sequential windows from the start;\n"
                 "at most one pass over the file (more is capped, with a note); the last batch\n"
                 "of a pass may hold fewer than B windows"},
        {"--batch", TRI_OPT_LONG, &batch, "B", 1, 1 << 20, .help = "sequences per batch (default 4)"},
        {"--threads", TRI_OPT_INT, &threads, "N", 1, 1024, .help = "threads"},
        {"--json", TRI_OPT_FLAG, &json, .help = "print one JSON object instead of a line"},
    };
    const tri_cmd_spec spec = {.cmd = "trident eval",
                               .who = "eval",
                               .usage = "--ckpt DIR --data FILE [options]",
                               .opts = table,
                               .n_opts = TRI_OPT_N(table)};
    int rc = tri_opt_parse(&spec, argc, argv);
    if (rc != TRI_OPT_GO) return tri_opt_exit(rc);
    if (!ckpt || !data) {
        tri_error("eval: --ckpt DIR and --data FILE are required");
        return TRI_EXIT_BAD_INPUT;
    }
    tri_set_threads(threads);
    tri_infer m;
    if (tri_infer_open(&m, ckpt, (size_t)batch) != 0) return TRI_EXIT_BAD_INPUT;
    tri_sampler s;
    if (tri_sampler_init(&s, data, m.cfg.model.seq_len, m.cfg.model.vocab_size, m.cfg.train.seed) != 0) {
        tri_infer_close(&m);
        return TRI_EXIT_BAD_INPUT;
    }
    /* one pass at most: past the end the windows would wrap around and count
     * twice, biasing the mean; the last batch of the pass may be partial */
    uint64_t pass = tri_sampler_eval_batches(&s, (size_t)batch);
    if ((uint64_t)batches > pass) {
        tri_note("--batches %ld of %ld sequences would pass over the %llu windows of %s more than once; evaluating "
                 "%llu batch%s (every window at most once)",
                 batches, batch, (unsigned long long)s.total_windows, data, (unsigned long long)pass,
                 pass == 1 ? "" : "es");
        batches = (long)pass;
    }
    uint64_t windows = (uint64_t)batches * (uint64_t)batch;
    if (windows > s.total_windows) windows = s.total_windows;
    tri_eval_result r;
    rc = tri_eval_run(&m, &s, windows, &r);
    if (rc == TRI_EXIT_OK) {
        if (json)
            printf("{\"loss\": %.6f, \"perplexity\": %.4f, \"tokens\": %llu, \"batches\": %zu, \"checkpoint\": "
                   "\"%s\"}\n",
                   r.loss, exp(r.loss), (unsigned long long)r.tokens, r.batches, m.dir);
        else
            printf("eval %s on %s: loss %.4f (perplexity %.2f) over %llu tokens\n", m.dir, data, r.loss, exp(r.loss),
                   (unsigned long long)r.tokens);
    }
    tri_sampler_free(&s);
    tri_infer_close(&m);
    return rc;
}
