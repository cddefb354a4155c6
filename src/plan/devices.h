/* The devices the planner knows (`trident plan --gpu`): what a kind of
 * device computes, holds and moves, as the planner's model reads it
 * (src/plan/plan.h, docs/plan.md). ONE table of GPU kinds, each constant
 * with its source; `--gpu cpu` measures this machine instead
 * (src/plan/probe.h). */
#ifndef TRI_PLAN_DEVICES_H
#define TRI_PLAN_DEVICES_H

#include <stddef.h>

#include "plan/probe.h"

/* One kind of device. The constants of the table in src/plan/devices.c and
 * docs/plan.md (with their sources), or measured (`--gpu cpu`). */
typedef struct tri_gpu_kind {
    const char *name; /* "h100", "a100", "cpu"                                        */
    const char *desc; /* e.g. "NVIDIA H100 SXM5 80GB"                                 */
    double peak_16;   /* dense bf16/fp16 FLOP/s per device (cpu: measured sgemm)     */
    double peak_32;   /* dense fp32 math FLOP/s used for precision fp32 (GPU: TF32)  */
    double mem_bytes; /* device memory                                               */
    double mem_bw;    /* memory bandwidth, bytes/s                                   */
    double intra_bw;  /* per device and direction inside a node (NVLink), bytes/s    */
    double inter_bw;  /* per device and direction across nodes (InfiniBand), bytes/s */
    int per_node;     /* devices per node                                            */
    double gemm_eff;  /* GEMM efficiency of large shapes (fraction of peak)          */
    double gemm_half; /* the dimension at which a GEMM's efficiency halves           */
    double attn_eff;  /* attention (QK^T, PV) at this fraction of peak               */
    double link_eff;  /* fraction of link bandwidth a ring collective reaches        */
    double latency_s; /* per collective step                                         */
    int flash;        /* 1: attention sized as the GPU backends' flash kernels (B x NH x T
                         floats of state, no scratch); 0: the CPU backend's own sizes (the
                         same state, a few tiles of scratch per thread)                  */
    double share;     /* CPU ranks oversubscribing the cores: the share of its cores a rank
                         gets while all compute (the rates above include it); 0: a device
                         of its own. A rank that waits gives its cores away. */
    double (*gemm_flops)(void *ctx, size_t M, size_t N, size_t K); /* measured FLOP/s of a GEMM shape, or NULL */
    void *gemm_ctx;
    double pcie_bw; /* host <-> device per device and direction (PCIe), bytes/s; 0: the
                       device's memory is the host's (cpu): offload moves nothing */
    double host_bw; /* host memory bandwidth one rank's share of the CPU step gets, bytes/s */
    double sync_s;  /* CPU ranks oversubscribing the cores (share < 1): what each blocking
                      collective or pipeline receive adds, a peer being descheduled
                      (docs/plan.md, tests/tools/sched_probe.c); 0 otherwise */
} tri_gpu_kind;

/* The table's kinds: "h100", "a100". NULL for another name. */
const tri_gpu_kind *tri_gpu_lookup(const char *name);

/* `--gpu cpu`: this machine, shared by `ranks` ranks of `threads` threads. */
typedef struct tri_cpu_setup {
    int ranks;          /* ranks on this machine (--gpus)                               */
    int threads;        /* threads per rank (the process's, tri_set_threads)            */
    long cores;         /* the machine's cores                                          */
    double avail_bytes; /* memory the ranks may use together                            */
    double sync_s;      /* what a blocking collective costs oversubscribed; < 0: the
                           measured constant (docs/plan.md "Oversubscribed cores")      */
    size_t ref[3];      /* the reference GEMM (M, N, K): the MLP's first, B T x 4C x C  */
} tri_cpu_setup;

/* Measures this machine into *kind: the reference GEMM's best speed (5
 * rounds) as the peak, a copy's bandwidth, the memory and the cores shared
 * by the ranks, shared-memory MPI between them; kind->gemm_flops measures
 * each GEMM shape through meter (tri_sgemm_meter_flops), which must stay
 * where it is while kind is used. Takes seconds; prints nothing. */
void tri_gpu_kind_cpu(tri_gpu_kind *kind, tri_sgemm_meter *meter, const tri_cpu_setup *s);

#endif
