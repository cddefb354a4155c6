/* Text generation: top-k / temperature draws over a sliding context
 * (src/train/sample.h). */
#include "train/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/stop.h"

/* splitmix64 */
static uint64_t next_u64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

int32_t tri_sample_pick(const float *logits, float *probs, int V, double temp, int top_k, uint64_t *rng) {
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

size_t tri_sample_context(int bos, int eot, const int32_t *pids, size_t np, size_t T, int32_t *ctx) {
    size_t len = 0;
    if (np == 0) {
        ctx[len++] = bos >= 0 ? bos : eot >= 0 ? eot : '\n';
        return len;
    }
    if (bos >= 0 && pids[0] != bos) ctx[len++] = bos;
    size_t room = T - len, skip = np > room ? np - room : 0; /* the prompt's last tokens */
    for (size_t i = skip; i < np; i++) ctx[len++] = pids[i];
    return len;
}

int tri_sample_run(tri_infer *m, const tri_tokenizer *tk, const char *prompt, const tri_sample_cfg *cfg, FILE *out) {
    int V = m->cfg.model.vocab_size;
    /* draw only ids the tokenizer can turn back into text (the model's
     * vocabulary may be larger than the tokenizer's) */
    int Vs = tri_tokenizer_vocab_size(tk) < V ? tri_tokenizer_vocab_size(tk) : V;
    size_t T = (size_t)m->cfg.model.seq_len;
    int32_t *ctx = calloc(T, sizeof *ctx);
    float *probs = malloc((size_t)V * sizeof *probs), *logits = malloc((size_t)V * sizeof *logits);
    int rc = TRI_EXIT_OK;
    if (!ctx || !probs || !logits) {
        tri_error("sample: out of memory");
        free(ctx);
        free(probs);
        free(logits);
        return TRI_EXIT_FAILURE;
    }
    int32_t *pids = NULL;
    size_t np = prompt ? tri_tokenizer_encode(tk, prompt, strlen(prompt), &pids) : 0;
    if (np == SIZE_MAX) {
        tri_error("sample: out of memory encoding the prompt");
        np = 0;
        prompt = NULL;
    }
    size_t len = tri_sample_context(tri_tokenizer_bos(tk), tri_tokenizer_eot(tk), pids, np, T, ctx);
    if (np > 0) fwrite(prompt, 1, strlen(prompt), out);
    free(pids);
    uint64_t rng = cfg->seed;
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    for (long n = 0; n < cfg->tokens; n++) {
        int sig = tri_stop_signal();
        if (sig) {
            fputc('\n', out);
            fflush(out);
            tri_error("sample: %s: stopped after %ld of %ld tokens", tri_stop_name(sig), n, cfg->tokens);
            rc = tri_exit_signal(sig);
            break;
        }
        tri_infer_forward(m, ctx, NULL);
        tri_infer_logits(m, len - 1, logits);
        int32_t next = tri_sample_pick(logits, probs, Vs, cfg->temperature, cfg->top_k, &rng);
        char *text = NULL;
        size_t nt = tri_tokenizer_decode(tk, &next, 1, &text);
        if (nt == SIZE_MAX) { /* an id the tokenizer has no text for */
            tri_error("sample: token %d has no text in the tokenizer", (int)next);
            rc = TRI_EXIT_FAILURE;
            break;
        }
        fwrite(text, 1, nt, out);
        fflush(out);
        free(text);
        if (len == T) { /* slide the window */
            memmove(ctx, ctx + 1, (T - 1) * sizeof *ctx);
            len--;
        }
        ctx[len++] = next;
    }
    if (rc < TRI_EXIT_SIGNAL_BASE) fputc('\n', out);
    free(ctx);
    free(probs);
    free(logits);
    return rc;
}
