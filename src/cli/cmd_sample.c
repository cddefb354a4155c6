/* `trident sample --ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]`:
 * the options, the checkpoint and the tokenizer, then the generation
 * (src/train/sample.h). */
#include <stdio.h>

#include "base/err.h"
#include "base/exit.h"
#include "cli/cli.h"
#include "data/tok/tokenizer.h"
#include "train/infer.h"
#include "train/sample.h"
#include "train/train.h"

int tri_cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *tokpath = NULL;
    long n_tokens = 256, top_k = 40;
    int threads = 0;
    double temp = 0.8;
    uint64_t seed = 1;
    const tri_opt table[] = {
        {"--ckpt", TRI_OPT_STR, &ckpt, "DIR", .help = "checkpoint root (its latest) or one step directory"},
        {"--prompt", TRI_OPT_STR, &prompt, "TEXT", .help = "text to continue (default: start of a document)"},
        {"--tokens", TRI_OPT_LONG, &n_tokens, "N", 0, 1000000, .help = "tokens to generate (default 256)"},
        {"--temperature", TRI_OPT_DOUBLE, &temp, "T", 0, 100, .help = "softmax temperature, 0 = greedy (default 0.8)"},
        {"--top-k", TRI_OPT_LONG, &top_k, "K", 0, 1 << 30,
         .help = "sample among the K likeliest tokens, 0 = all (default 40)"},
        {"--seed", TRI_OPT_U64, &seed, "S", .help = "random seed (default 1)"},
        {"--tokenizer", TRI_OPT_STR, &tokpath, "PATH",
         .help = "tokenizer.json (default: the run's data.tokenizer, else bytes)"},
        {"--threads", TRI_OPT_INT, &threads, "N", 1, 1024, .help = "threads"},
    };
    const tri_cmd_spec spec = {.cmd = "trident sample",
                               .who = "sample",
                               .usage = "--ckpt DIR [options]",
                               .opts = table,
                               .n_opts = TRI_OPT_N(table)};
    int rc = tri_opt_parse(&spec, argc, argv);
    if (rc != TRI_OPT_GO) return tri_opt_exit(rc);
    if (!ckpt) {
        tri_error("sample: --ckpt DIR is required");
        return TRI_EXIT_BAD_INPUT;
    }
    tri_set_threads(threads);
    tri_infer m;
    if (tri_infer_open(&m, ckpt, 1) != 0) return TRI_EXIT_BAD_INPUT;
    tri_tokenizer tk;
    if (!tokpath && m.cfg.data.tokenizer[0]) tokpath = m.cfg.data.tokenizer;
    if (tokpath) {
        if (tri_tokenizer_load(&tk, tokpath) != 0) {
            tri_infer_close(&m);
            return TRI_EXIT_BAD_INPUT;
        }
    } else {
        tri_tokenizer_bytes(&tk);
    }
    int V = m.cfg.model.vocab_size;
    if (tri_tokenizer_vocab_size(&tk) > V) {
        tri_error("%s: tokenizer has %d tokens but the model's vocab_size is %d", tokpath ? tokpath : "(bytes)",
                  tri_tokenizer_vocab_size(&tk), V);
        rc = TRI_EXIT_BAD_INPUT;
    } else {
        tri_sample_cfg sc = {.tokens = n_tokens, .temperature = temp, .top_k = (int)top_k, .seed = seed};
        rc = tri_sample_run(&m, &tk, prompt, &sc, stdout);
    }
    tri_tokenizer_free(&tk);
    tri_infer_close(&m);
    return rc;
}
