/* The per-op profile (`trident bench --profile`): the time of every op,
 * summed by kind (GEMMs by direction and by the layer part whose weight they
 * use, attention, LayerNorm, ...), per step.
 *
 * It is an op table that wraps the backend's: tri_profile_start puts it in
 * the context (ctx->ops), every op goes through it to the real one, and
 * tri_profile_stop puts the real table back. A run without a profile never
 * sees it: no clock is read, no branch is taken on the way to an op.
 *
 * How an op is timed:
 *   - on a backend whose ops finish before they return (the CPU), by the
 *     monotonic clock read before and after the op;
 *   - on a backend with timing marks (kernels/ops.h marks_*: CUDA events on
 *     the compute stream), by a pair of marks recorded around the op's
 *     launches, from a pool made when the profile starts. The pairs are read
 *     once per step (tri_profile_step: one wait), not per op; a step with
 *     more ops than the pool has pairs reads it (one wait) when it fills,
 *     and the pool grows to that step's count before the next one.
 *
 * Which op is which kind: GEMMs (matmul_fwd, matmul_gelu_fwd: forward;
 * matmul_bwd, matmul_bwd_dgelu: input gradient and weight gradient, each
 * op run as its two halves, see profile.c) by direction, and by role: the
 * weight they read, looked up in the ranges given by tri_profile_role (qkv,
 * attention projection, fc, fc projection, LM head; "unknown" for a weight
 * no range holds). attention_fwd (the selective recompute's rerun in
 * backward included) and attention_bwd; LayerNorm (RMSNorm too); GELU
 * (SwiGLU too); cross-entropy (its three steps and the loss sum); embedding;
 * "elementwise": residual, bias gradient, RoPE, add, cast, copy, zero; "optimizer": AdamW and the gradient norm
 * (sumsq) and clipping (scale). The staging copies, allocation and the
 * stream waits are not ops here: their time is the caller's "other".
 * Communication is not timed here either: the groups time themselves
 * (parallel/comm.h tri_comm_stats). */
#ifndef TRI_PROFILE_H
#define TRI_PROFILE_H

#include <stddef.h>

#include "kernels/ctx.h"

typedef enum tri_prof_kind {
    TRI_PROF_GEMM_FWD = 0, /* GEMM forward (the fused GELU epilogue included)  */
    TRI_PROF_GEMM_DINP,    /* GEMM input gradient (a fused dGELU included)     */
    TRI_PROF_GEMM_DWEIGHT, /* GEMM weight gradient (and the bias gradient)     */
    TRI_PROF_ATTENTION_FWD,
    TRI_PROF_ATTENTION_BWD,
    TRI_PROF_LAYERNORM,
    TRI_PROF_GELU,
    TRI_PROF_CROSSENTROPY,
    TRI_PROF_EMBEDDING,
    TRI_PROF_ELEMENTWISE,
    TRI_PROF_OPTIMIZER,
    TRI_PROF_KINDS
} tri_prof_kind;

/* The layer part a GEMM belongs to, by the weight it reads. */
typedef enum tri_prof_role {
    TRI_PROF_QKV = 0,
    TRI_PROF_ATTPROJ,
    TRI_PROF_FC,
    TRI_PROF_FCPROJ,
    TRI_PROF_HEAD,
    TRI_PROF_UNKNOWN,
    TRI_PROF_ROLES
} tri_prof_role;

/* A GEMM's direction: forward, input gradient, weight gradient (the index
 * of its kind from TRI_PROF_GEMM_FWD). */
#define TRI_PROF_DIRS 3

/* What the profile measured since it started or was last reset. */
typedef struct tri_prof_totals {
    double ms[TRI_PROF_KINDS];                     /* op time, summed            */
    unsigned long long calls[TRI_PROF_KINDS];      /* ops timed                  */
    double gemm_ms[TRI_PROF_ROLES][TRI_PROF_DIRS]; /* the GEMM kinds by role     */
    unsigned long long gemm_calls[TRI_PROF_ROLES][TRI_PROF_DIRS];
    int steps; /* tri_profile_step calls                                       */
    int marks; /* 1: timed by the backend's marks (GPU events); 0: by the clock */
} tri_prof_totals;

typedef struct tri_profile tri_profile;

/* Starts profiling the ops of c: wraps c->ops (kept, and called by every
 * wrapper) in the profile's table and installs it in c; on a backend with
 * timing marks, makes the pool of marks, `pairs` pairs of them (0: 4096;
 * tests give fewer). c must stay where it is until tri_profile_stop. NULL
 * after a message when there is no memory, or the marks cannot be made (c is
 * then left as it was). */
tri_profile *tri_profile_start(tri_ctx *c, int pairs);
/* NULL-safe: puts the real table back in the context, frees the marks (any
 * not read are dropped) and p. */
void tri_profile_stop(tri_profile *p);

/* GEMMs whose weight pointer lies in [weight, weight + bytes) count under
 * role r (later ranges win where ranges overlap). 0, or -1 after a message
 * when there is no memory. */
int tri_profile_role(tri_profile *p, const void *weight, size_t bytes, tri_prof_role r);

/* The end of a step: reads the marks of the ops timed since the last call
 * (one wait on a GPU; nothing on the CPU), adds them to the totals and
 * counts the step. */
void tri_profile_step(tri_profile *p);
/* Zeroes the totals (after the warm-up step); marks not yet read by
 * tri_profile_step are dropped. */
void tri_profile_reset(tri_profile *p);
const tri_prof_totals *tri_profile_totals(const tri_profile *p);

/* The kind's name as a JSON key stem ("gemm_fwd", "attention_bwd", ...)
 * and for people ("GEMM forward", ...). */
const char *tri_prof_kind_key(tri_prof_kind k);
const char *tri_prof_kind_label(tri_prof_kind k);
/* "qkv", "attproj", "fc", "fcproj", "head", "unknown". */
const char *tri_prof_role_key(tri_prof_role r);

#endif
