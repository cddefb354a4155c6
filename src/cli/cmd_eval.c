/* `trident eval --ckpt DIR --data FILE [--batches N] [--batch B] [--json]` */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/sampler.h"
#include "base/err.h"
#include "base/stop.h"
#include "cli/cli.h"
#include "train/infer.h"
#include "train/train.h"

static void eval_usage(FILE *f) {
    fprintf(f, "usage: trident eval --ckpt DIR --data FILE [options]\n"
               "  --ckpt DIR      checkpoint root (its latest) or one step directory\n"
               "  --data FILE     token file (llm.c .bin or Megatron .bin/.idx)\n"
               "  --batches N     batches to evaluate (default 20), sequential windows from the start;\n"
               "                  at most one pass over the file (more is capped, with a note)\n"
               "  --batch B       sequences per batch (default 4)\n"
               "  --threads N     threads\n"
               "  --json          print one JSON object instead of a line\n");
}

int tri_cmd_eval(int argc, char **argv) {
    const char *ckpt = NULL, *data = NULL;
    long batches = 20, batch = 4, threads = 0;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            eval_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--ckpt") && v) {
            ckpt = v;
            i++;
        } else if (!strcmp(a, "--data") && v) {
            data = v;
            i++;
        } else if (!strcmp(a, "--batches") && v) {
            if (tri_arg_int(a, v, 1, 1 << 30, &batches)) return 2;
            i++;
        } else if (!strcmp(a, "--batch") && v) {
            if (tri_arg_int(a, v, 1, 1 << 20, &batch)) return 2;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (tri_arg_int(a, v, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--json"))
            json = 1;
        else {
            tri_error("eval: unknown or incomplete option '%s' (try `trident eval --help`)", a);
            return 2;
        }
    }
    if (!ckpt || !data) {
        tri_error("eval: --ckpt DIR and --data FILE are required");
        return 2;
    }
    tri_set_threads((int)threads);
    tri_infer m;
    if (tri_infer_open(&m, ckpt, (size_t)batch) != 0) return 2;
    tri_sampler s;
    if (tri_sampler_init(&s, data, m.cfg.model.seq_len, m.cfg.model.vocab_size, m.cfg.train.seed) != 0) {
        tri_infer_close(&m);
        return 2;
    }
    /* one pass at most: past the end the windows would wrap around and count
     * twice, biasing the mean */
    uint64_t fit = s.total_windows / (uint64_t)batch;
    if (fit == 0) {
        tri_error("%s: %llu window%s of seq_len + 1 = %d tokens, fewer than --batch %ld: use --batch %llu", data,
                  (unsigned long long)s.total_windows, s.total_windows == 1 ? "" : "s", m.cfg.model.seq_len + 1, batch,
                  (unsigned long long)s.total_windows);
        tri_sampler_free(&s);
        tri_infer_close(&m);
        return 2;
    }
    if ((uint64_t)batches > fit) {
        fprintf(stderr,
                "trident: note: --batches %ld of %ld sequences would pass over the %llu windows of %s more than "
                "once; evaluating %llu batches (every window at most once)\n",
                batches, batch, (unsigned long long)s.total_windows, data, (unsigned long long)fit);
        batches = (long)fit;
    }
    size_t T = (size_t)m.cfg.model.seq_len, n = (size_t)batch * T;
    int32_t *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
    if (!in || !tg) {
        tri_error("eval: out of memory for --batch %ld", batch);
        free(in);
        free(tg);
        tri_sampler_free(&s);
        tri_infer_close(&m);
        return 1;
    }
    double sum = 0.0;
    int rc = 0;
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    for (long b = 0; b < batches && rc == 0; b++) {
        int sig = tri_stop_signal();
        if (sig) {
            tri_error("eval: %s: stopped after %ld of %ld batches, no result", tri_stop_name(sig), b, batches);
            rc = 128 + sig;
        } else if (tri_sampler_fill_eval(&s, (size_t)b, (size_t)batch, in, tg) != 0) {
            rc = 1; /* said: the file was truncated under us */
        } else {
            sum += tri_infer_forward(&m, in, tg);
        }
    }
    if (rc != 0) {
        free(in);
        free(tg);
        tri_sampler_free(&s);
        tri_infer_close(&m);
        return rc;
    }
    double tokens = (double)batches * (double)n, loss = sum / tokens;
    if (json)
        printf("{\"loss\": %.6f, \"perplexity\": %.4f, \"tokens\": %.0f, \"batches\": %ld, \"checkpoint\": \"%s\"}\n",
               loss, exp(loss), tokens, batches, m.dir);
    else
        printf("eval %s on %s: loss %.4f (perplexity %.2f) over %.0f tokens\n", m.dir, data, loss, exp(loss), tokens);
    free(in);
    free(tg);
    tri_sampler_free(&s);
    tri_infer_close(&m);
    return 0;
}
