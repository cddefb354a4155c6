/* The mean token loss of a checkpoint on a token file (src/train/eval.h). */
#include "train/eval.h"

#include <stdlib.h>

#include "base/err.h"
#include "base/exit.h"
#include "base/stop.h"

int tri_eval_run(tri_infer *m, const tri_sampler *s, uint64_t windows, tri_eval_result *r) {
    TRI_CHECK(windows > 0 && windows <= s->total_windows && s->seq_len == m->cfg.model.seq_len);
    size_t B = m->B, T = (size_t)m->cfg.model.seq_len, n = B * T;
    size_t batches = (size_t)((windows + B - 1) / B);
    int32_t *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg);
    if (!in || !tg) {
        tri_error("eval: out of memory for --batch %zu", B);
        free(in);
        free(tg);
        return TRI_EXIT_FAILURE;
    }
    double sum = 0.0;
    int rc = TRI_EXIT_OK;
    tri_stop_install(TRI_STOP_SECOND_KILLS);
    for (size_t b = 0; b < batches && rc == TRI_EXIT_OK; b++) {
        /* windows b*B .. b*B + B - 1; in a partial last batch the rows past
         * `windows` hold the windows after it (wrapping around at the end of
         * the file): computed, never counted */
        size_t rows = windows - (uint64_t)b * B < B ? (size_t)(windows - (uint64_t)b * B) : B;
        int sig = tri_stop_signal();
        if (sig) {
            tri_error("eval: %s: stopped after %zu of %zu batches, no result", tri_stop_name(sig), b, batches);
            rc = tri_exit_signal(sig);
        } else if (tri_sampler_fill_eval(s, b, B, in, tg) != 0) {
            rc = TRI_EXIT_FAILURE; /* said: the file was truncated under us */
        } else {
            sum += tri_infer_loss(m, in, tg, rows);
        }
    }
    free(in);
    free(tg);
    if (rc != TRI_EXIT_OK) return rc;
    r->tokens = windows * T;
    r->loss = sum / (double)r->tokens;
    r->batches = batches;
    return TRI_EXIT_OK;
}
