/* The config's rules across keys (tri_config_check_keys, config.h): each names the keys
 * and the numbers at fault. Split from config.c, which reads, ranges and
 * prints the keys one by one. */
#include "config/config.h"

#include <stdarg.h>
#include <stdio.h>

#include "base/err.h"
#include "model/gpt.h"
#include "parallel/schedule.h"

/* Prints "trident: <file>: <message>\n" to stderr as one write. */
static void report(const char *file, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tri_error("%s: %s", file, msg);
}

/* The architecture's own rules: Llama's shapes (model/gpt.h), and no
 * Llama-only key set away from its default on a GPT-2, where it would mean
 * nothing (a config that says n_kv_head 2 with arch gpt2 is a mistake). */
static int check_arch(const tri_config *cfg, const char *file) {
    const tri_model_cfg *m = &cfg->model;
    if (m->arch == TRI_ARCH_GPT2) {
        const char *key = NULL;
        char val[64] = "";
        if (m->n_kv_head != 0 && m->n_kv_head != m->n_head)
            key = "model.n_kv_head", snprintf(val, sizeof val, "%d", m->n_kv_head);
        else if (m->ffn_hidden != 0)
            key = "model.ffn_hidden", snprintf(val, sizeof val, "%d", m->ffn_hidden);
        else if (m->tie_embeddings == 0)
            key = "model.tie_embeddings", snprintf(val, sizeof val, "false");
        else if (m->norm_eps != 1e-5)
            key = "model.norm_eps", snprintf(val, sizeof val, "%g", m->norm_eps);
        else if (m->rope_theta != 10000)
            key = "model.rope_theta", snprintf(val, sizeof val, "%g", m->rope_theta);
        else if (m->rope_scaling_factor != 0)
            key = "model.rope_scaling_factor", snprintf(val, sizeof val, "%g", m->rope_scaling_factor);
        if (key) {
            report(file, "%s = %s is for model.arch \"llama\"; model.arch is \"gpt2\" (4 n_embd GELU MLP, n_head "
                   "key/value heads, tied LM head, LayerNorm eps 1e-5, learned positions): set model.arch to "
                   "\"llama\" or remove the key",
                   key, val);
            return -1;
        }
        return 0;
    }
    char why[512];
    if (tri_model_arch_why(m, cfg->parallel.tp, why, sizeof why) != 0) {
        report(file, "%s", why);
        return -1;
    }
    return 0;
}

/* The parallel sizes and their products, in 64 bits: every later product of
 * them (the world, the model chunks, the ranks of a group) is then known to
 * fit an int. TRI_CONFIG_MAX_WORLD ranks is 2^20, 64 times the largest
 * published training job (16K GPUs); every pipeline stage (and, with vpp, every
 * virtual chunk) holds at least one layer, so pp x vpp <= n_layer; at most
 * TRI_CONFIG_MAX_VPP chunks per stage (src/plan/stage_plan.h's TRI_MAX_VPP);
 * and at most TRI_CONFIG_MAX_MICRO micro-batches per step per DP rank, and
 * pp x vpp x micro-batches at most TRI_SCHED_MAX_UNITS (the schedule is sized
 * by them: 2^31 micro-batches hung `trident plan`). */
static int check_parallel_sizes(const tri_config *cfg, const char *file) {
    const tri_parallel_cfg *p = &cfg->parallel;
    long long world = (long long)p->tp * p->cp * p->pp * p->dp, chunks = (long long)p->pp * p->vpp;
    if (world > TRI_CONFIG_MAX_WORLD) {
        report(file,
               "parallel.tp (%d) x parallel.cp (%d) x parallel.pp (%d) x parallel.dp (%d) = %lld ranks: at most %d "
               "(2^20) ranks are supported",
               p->tp, p->cp, p->pp, p->dp, world, TRI_CONFIG_MAX_WORLD);
        return -1;
    }
    if (p->vpp > TRI_CONFIG_MAX_VPP) {
        report(file, "parallel.vpp: at most %d virtual chunks per stage, got %d", TRI_CONFIG_MAX_VPP, p->vpp);
        return -1;
    }
    long long micro = (long long)cfg->train.global_batch / ((long long)cfg->train.micro_batch * p->dp);
    if (micro > TRI_CONFIG_MAX_MICRO) {
        report(file,
               "train.global_batch (%d) / (train.micro_batch (%d) x parallel.dp (%d)) = %lld micro-batches per step "
               "on each DP rank: at most %d (raise train.micro_batch or parallel.dp)",
               cfg->train.global_batch, cfg->train.micro_batch, p->dp, micro, TRI_CONFIG_MAX_MICRO);
        return -1;
    }
    if (chunks * micro > TRI_SCHED_MAX_UNITS) {
        report(file,
               "parallel.pp (%d) x parallel.vpp (%d) x %lld micro-batches per step (train.global_batch / "
               "(train.micro_batch x parallel.dp)) = %lld pipeline units: at most %d (2^22; the schedule holds each)",
               p->pp, p->vpp, micro, chunks * micro, TRI_SCHED_MAX_UNITS);
        return -1;
    }
    if (chunks > cfg->model.n_layer) {
        report(file,
               "parallel.pp (%d) x parallel.vpp (%d) = %lld model chunks, more than model.n_layer (%d): every chunk "
               "needs at least one layer",
               p->pp, p->vpp, chunks, cfg->model.n_layer);
        return -1;
    }
    return 0;
}

/* Sequence parallelism shards the sequence over the TP ranks. */
static int check_sequence_parallel(const tri_config *cfg, const char *file) {
    if (!cfg->parallel.sequence_parallel) return 0;
    if (cfg->parallel.tp < 2) {
        report(file,
               "parallel.sequence_parallel needs parallel.tp > 1 (it shards the sequence over the "
               "tensor-parallel ranks), got parallel.tp = %d",
               cfg->parallel.tp);
        return -1;
    }
    if (cfg->model.seq_len % cfg->parallel.tp != 0) {
        report(file, "parallel.sequence_parallel: model.seq_len (%d) is not divisible by parallel.tp (%d)",
               cfg->model.seq_len, cfg->parallel.tp);
        return -1;
    }
    return 0;
}

/* Context parallelism splits each sequence into 2 x cp chunks (each CP rank
 * holds two, the causal load balance); under sequence parallelism too, a CP
 * rank's seq_len / cp positions are sharded over the TP ranks. */
static int check_context_parallel(const tri_config *cfg, const char *file) {
    const int cp = cfg->parallel.cp, T = cfg->model.seq_len;
    if (cp == 1) return 0;
    if (T % (2 * cp) != 0) {
        report(file,
               "parallel.cp (%d): model.seq_len (%d) is not divisible by 2 x parallel.cp = %d (each sequence is "
               "split into 2 x cp chunks, two per CP rank)",
               cp, T, 2 * cp);
        return -1;
    }
    if (cfg->parallel.sequence_parallel && (T / cp) % cfg->parallel.tp != 0) {
        report(file,
               "parallel.sequence_parallel with parallel.cp (%d): model.seq_len / cp = %d positions per CP rank are "
               "not divisible by parallel.tp (%d)",
               cp, T / cp, cfg->parallel.tp);
        return -1;
    }
    return 0;
}

int tri_config_check_keys(const tri_config *cfg, const char *file) {
    if (check_arch(cfg, file) != 0) return -1;
    if (cfg->checkpoint.every > 0 && cfg->checkpoint.every_s > 0) {
        report(file,
               "checkpoint.every (%d steps) and checkpoint.every_s (%g s) are both set: choose one (set the "
               "other to 0)",
               cfg->checkpoint.every, cfg->checkpoint.every_s);
        return -1;
    }
    if (check_parallel_sizes(cfg, file) != 0) return -1;
    if (check_sequence_parallel(cfg, file) != 0) return -1;
    if (check_context_parallel(cfg, file) != 0) return -1;
    return 0;
}
