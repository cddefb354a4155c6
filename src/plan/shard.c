/* ZeRO's stages, context parallelism and optimizer offload in closed form;
 * see src/plan/shard.h. */
#include "plan/shard.h"

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

void tri_shard_mem_of(const tri_shard_in *in, tri_shard_mem *out) {
    const size_t P = (size_t)in->P, d = in->d > 0 ? (size_t)in->d : 1, K = 8 + (in->P == 2 ? 4 : 0);
    const size_t S = in->zero ? in->alloc / d : in->elems, all = in->zero ? in->alloc : in->elems;
    out->params = all * P;
    out->grads = all * 4;
    if (in->zero >= 2) out->grads = 4 * (S + all);
    if (in->zero == 3) {
        size_t w = min_size((size_t)(in->n_chunks > 1 ? 2 : 1) * in->chunk_elems, all);
        if (in->units_elems > 0) w = min_size(w, in->units_elems + (in->n_chunks > 1 ? in->unit_elems : 0));
        out->params = P * (S + w);
    }
    out->optim = K * S;
    out->host = 0;
    if (in->offload) {
        out->host = out->optim + (in->staging ? S * (4 + P) : 0);
        out->optim = 0;
    }
}

double tri_shard_dp_bytes(int zero, int d, int m, int P, double N, double *rs, double *ag) {
    double r = 0, a = 0;
    if (d > 1) {
        const double f = (double)(d - 1) / d, G = 4.0 * N, W = (double)P * N;
        if (zero == 0) {
            r = 2 * f * G;
        } else {
            r = f * G;
            a = (zero == 3 ? 2.0 * m : 1.0) * f * W;
        }
    }
    if (rs) *rs = r;
    if (ag) *ag = a;
    return r + a;
}

double tri_shard_cp_ring_bytes(int cp, double B, double T, double kv_width, double A, int backward) {
    if (cp <= 1) return 0;
    return (cp - 1) * 2.0 * B * (T / cp) * kv_width * (backward ? A + 4.0 : A);
}

double tri_shard_pcie_bytes(double S, int P) { return S * (4.0 + P + (P == 4 ? 4.0 : 0.0)); }
