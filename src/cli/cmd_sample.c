/* `trident sample --ckpt DIR [--prompt TEXT] [--tokens N] [--temperature T] [--top-k K] [--seed S]` */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/tok/tokenizer.h"
#include "base/stop.h"
#include "cli/cli.h"
#include "train/infer.h"
#include "train/train.h"
#include "base/err.h"

static void sample_usage(FILE *f) {
    fprintf(f, "usage: trident sample --ckpt DIR [options]\n"
               "  --ckpt DIR          checkpoint root (its latest) or one step directory\n"
               "  --prompt TEXT       text to continue (default: start of a document)\n"
               "  --tokens N          tokens to generate (default 256)\n"
               "  --temperature T     softmax temperature, 0 = greedy (default 0.8)\n"
               "  --top-k K           sample among the K likeliest tokens, 0 = all (default 40)\n"
               "  --seed S            random seed (default 1)\n"
               "  --tokenizer PATH    tokenizer.json (default: the run's data.tokenizer, else bytes)\n"
               "  --threads N         threads\n");
}

static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Picks a token from logits (V) with temperature and top-k; probs is scratch (V). */
static int32_t pick(const float *logits, float *probs, int V, double temp, int top_k, uint64_t *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (temp <= 0.0) return best;
    /* the k-th largest logit is the cut-off */
    float cut = -INFINITY;
    if (top_k > 0 && top_k < V) {
        memcpy(probs, logits, (size_t)V * sizeof(float));
        /* partial selection: k passes would be O(kV); a threshold search is simpler */
        float lo = logits[best] - 1e4f, hi = logits[best];
        for (int it = 0; it < 60; it++) {
            float mid = 0.5f * (lo + hi);
            int count = 0;
            for (int i = 0; i < V; i++) count += probs[i] >= mid;
            if (count >= top_k)
                lo = mid;
            else
                hi = mid;
        }
        cut = lo;
    }
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        double p = logits[i] >= cut ? exp(((double)logits[i] - logits[best]) / temp) : 0.0;
        probs[i] = (float)p;
        sum += p;
    }
    double u = ((double)(next_u64(rng) >> 11) / 9007199254740992.0) * sum;
    double acc = 0.0;
    for (int i = 0; i < V; i++) {
        acc += probs[i];
        if (probs[i] > 0 && acc >= u) return i;
    }
    return best;
}

int tri_cmd_sample(int argc, char **argv) {
    const char *ckpt = NULL, *prompt = NULL, *tokpath = NULL;
    long n_tokens = 256, top_k = 40, threads = 0;
    double temp = 0.8;
    uint64_t seed = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            sample_usage(stdout);
            return 0;
        } else if (!strcmp(a, "--ckpt") && v) {
            ckpt = v;
            i++;
        } else if (!strcmp(a, "--prompt") && v) {
            prompt = v;
            i++;
        } else if (!strcmp(a, "--tokenizer") && v) {
            tokpath = v;
            i++;
        } else if (!strcmp(a, "--tokens") && v) {
            if (tri_arg_int(a, v, 0, 1000000, &n_tokens)) return 2;
            i++;
        } else if (!strcmp(a, "--top-k") && v) {
            if (tri_arg_int(a, v, 0, 1 << 30, &top_k)) return 2;
            i++;
        } else if (!strcmp(a, "--threads") && v) {
            if (tri_arg_int(a, v, 1, 1024, &threads)) return 2;
            i++;
        } else if (!strcmp(a, "--temperature") && v) {
            if (tri_arg_double(a, v, 0, 100, &temp)) return 2;
            i++;
        } else if (!strcmp(a, "--seed") && v) {
            if (tri_arg_u64(a, v, &seed)) return 2;
            i++;
        } else {
            tri_error("sample: unknown or incomplete option '%s' (try `trident sample --help`)", a);
            return 2;
        }
    }
    if (!ckpt) {
        tri_error("sample: --ckpt DIR is required");
        return 2;
    }
    tri_set_threads((int)threads);
    tri_infer m;
    if (tri_infer_open(&m, ckpt, 1) != 0) return 2;
    tri_tokenizer tk;
    if (!tokpath && m.cfg.data.tokenizer[0]) tokpath = m.cfg.data.tokenizer;
    if (tokpath) {
        if (tri_tokenizer_load(&tk, tokpath) != 0) {
            tri_infer_close(&m);
            return 2;
        }
    } else {
        tri_tokenizer_bytes(&tk);
    }
    int V = m.cfg.model.vocab_size;
    if (tri_tokenizer_vocab_size(&tk) > V) {
        tri_error("%s: tokenizer has %d tokens but the model's vocab_size is %d", tokpath ? tokpath : "(bytes)",
                  tri_tokenizer_vocab_size(&tk), V);
        tri_tokenizer_free(&tk);
        tri_infer_close(&m);
        return 2;
    }
    /* draw only ids the tokenizer can turn back into text (the model's
     * vocabulary may be larger than the tokenizer's) */
    int Vs = tri_tokenizer_vocab_size(&tk) < V ? tri_tokenizer_vocab_size(&tk) : V;
    size_t T = (size_t)m.cfg.model.seq_len;
    int32_t *ctx = calloc(T, sizeof *ctx);
    float *probs = malloc((size_t)V * sizeof *probs), *logits = malloc((size_t)V * sizeof *logits);
    int rc = 0;
    if (!ctx || !probs || !logits) {
        tri_error("sample: out of memory");
        free(ctx);
        free(probs);
        free(logits);
        tri_tokenizer_free(&tk);
        tri_infer_close(&m);
        return 1;
    }
    int32_t *pids = NULL;
    size_t np = prompt ? tri_tokenizer_encode(&tk, prompt, strlen(prompt), &pids) : 0;
    if (np == SIZE_MAX) {
        tri_error("sample: out of memory encoding the prompt");
        np = 0;
        prompt = NULL;
    }
    size_t len = 0;
    if (np == 0) {
        int eot = tri_tokenizer_eot(&tk);
        ctx[len++] = eot >= 0 ? eot : '\n';
    } else {
        size_t skip = np > T ? np - T : 0;
        for (size_t i = skip; i < np; i++) ctx[len++] = pids[i];
        fwrite(prompt, 1, strlen(prompt), stdout);
    }
    free(pids);
    uint64_t rng = seed;
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    for (long n = 0; n < n_tokens; n++) {
        int sig = tri_stop_signal();
        if (sig) {
            printf("\n");
            fflush(stdout);
            tri_error("sample: %s: stopped after %ld of %ld tokens", tri_stop_name(sig), n, n_tokens);
            rc = 128 + sig;
            break;
        }
        tri_infer_forward(&m, ctx, NULL);
        tri_infer_logits(&m, len - 1, logits);
        int32_t next = pick(logits, probs, Vs, temp, (int)top_k, &rng);
        char *text = NULL;
        size_t nt = tri_tokenizer_decode(&tk, &next, 1, &text);
        if (nt == SIZE_MAX) { /* an id the tokenizer has no text for */
            tri_error("sample: token %d has no text in the tokenizer", (int)next);
            rc = 1;
            break;
        }
        fwrite(text, 1, nt, stdout);
        fflush(stdout);
        free(text);
        if (len == T) { /* slide the window */
            memmove(ctx, ctx + 1, (T - 1) * sizeof *ctx);
            len--;
        }
        ctx[len++] = next;
    }
    if (rc < 128) printf("\n");
    free(ctx);
    free(probs);
    free(logits);
    tri_tokenizer_free(&tk);
    tri_infer_close(&m);
    return rc;
}
