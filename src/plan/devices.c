/* The devices the planner knows; see src/plan/devices.h and docs/plan.md. */
#include "plan/devices.h"

#include <string.h>

/* ------------------------------------------------------------------------ */
/* the GPUs: ONE table, its sources in docs/plan.md                           */

#define TB (1e12)
#define GB (1e9)

static const tri_gpu_kind gpu_table[] = {
    /* NVIDIA H100 SXM5 80GB datasheet: 989 TFLOP/s dense BF16 (1,979 with
     * sparsity), 494 TF32 dense, 80 GB HBM3 at 3.35 TB/s, NVLink 900 GB/s
     * (both directions: 450 each way); DGX H100: 8 GPUs, one 400 Gb/s NDR
     * ConnectX-7 port per GPU (50 GB/s each way); each GPU on PCIe Gen5 x16
     * (64 GB/s each way) to two Xeon 8480C of 8 DDR5-4800 channels each
     * (614 GB/s for the 8 GPUs, 77 each; about half of it reached by the
     * CPU AdamW of optimizer offload: 40 GB/s). */
    {.name = "h100",
     .desc = "NVIDIA H100 SXM5 80GB",
     .peak_16 = 989 * TB,
     .peak_32 = 494.5 * TB,
     .mem_bytes = 80 * GB,
     .mem_bw = 3.35 * TB,
     .intra_bw = 450 * GB,
     .inter_bw = 50 * GB,
     .per_node = 8,
     .gemm_eff = 0.80,
     .gemm_half = 96.0,
     .attn_eff = 0.45,
     .link_eff = 0.80,
     .latency_s = 10e-6,
     .flash = 1,
     .pcie_bw = 64 * GB,
     .host_bw = 40 * GB},
    /* NVIDIA A100 SXM4 80GB datasheet: 312 TFLOP/s dense BF16, 156 TF32,
     * 80 GB HBM2e at 2.039 TB/s, NVLink 600 GB/s (300 each way); DGX A100:
     * 8 GPUs, eight 200 Gb/s HDR ports (25 GB/s each way per GPU); PCIe Gen4
     * x16 (32 GB/s each way) to two EPYC 7742 of 8 DDR4-3200 channels each
     * (410 GB/s for 8 GPUs, 51 each; half of it for the CPU AdamW: 25 GB/s). */
    {.name = "a100",
     .desc = "NVIDIA A100 SXM4 80GB",
     .peak_16 = 312 * TB,
     .peak_32 = 156 * TB,
     .mem_bytes = 80 * GB,
     .mem_bw = 2.039 * TB,
     .intra_bw = 300 * GB,
     .inter_bw = 25 * GB,
     .per_node = 8,
     .gemm_eff = 0.85,
     .gemm_half = 64.0,
     .attn_eff = 0.50,
     .link_eff = 0.80,
     .latency_s = 10e-6,
     .flash = 1,
     .pcie_bw = 32 * GB,
     .host_bw = 25 * GB},
};

/* ------------------------------------------------------------------------ */
/* `--gpu cpu`: this machine, measured                                       */

/* Shared-memory MPI between ranks of one machine: the all-reduce bandwidth
 * docs/performance.md measured at tp = 2 (82 MB per step in 26 ms). */
#define CPU_MPI_BW 3.0e9
/* Ranks oversubscribing the cores: what one blocking collective adds beyond
 * the lockstep share, a peer being descheduled (tests/tools/sched_probe.c's
 * delay_ms at 4 single-thread ranks on this machine's 2 cores with 7.4 ms of
 * work between all-reduces: 0.65-0.71 ms; at 3 ranks it is <= 0;
 * docs/plan.md "Oversubscribed cores"); tri_cpu_setup.sync_s replaces it. */
#define CPU_SYNC_S 0.7e-3

void tri_gpu_kind_cpu(tri_gpu_kind *kind, tri_sgemm_meter *meter, const tri_cpu_setup *s) {
    double share = tri_core_share(s->ranks, s->threads, s->cores);
    tri_sgemm_meter_init(meter, s->ref[0], s->ref[1], s->ref[2], share);
    tri_sgemm_meter_reference(meter, 5);
    /* the ranks share one memory system: a single copy stream is about
     * what this VM's memory gives, split between the ranks */
    double mem_bw = tri_copy_bandwidth() / (double)s->ranks;
    *kind = (tri_gpu_kind){
        .name = "cpu",
        .desc = "this machine (measured sgemm)",
        .peak_16 = meter->ref_best,
        .peak_32 = meter->ref_best,
        .mem_bytes = s->avail_bytes / (double)s->ranks,
        .mem_bw = mem_bw,
        .intra_bw = CPU_MPI_BW,
        .inter_bw = CPU_MPI_BW,
        .per_node = s->ranks,
        .gemm_eff = 1.0,
        .gemm_half = 1.0,
        .attn_eff = 1.0,
        .link_eff = 1.0,
        .latency_s = 20e-6,
        .flash = 0,
        .share = share,
        .gemm_flops = tri_sgemm_meter_flops,
        .gemm_ctx = meter,
        .pcie_bw = 0, /* the backend's memory is the host's: offload moves nothing */
        .host_bw = mem_bw,
        .sync_s = s->sync_s >= 0 ? s->sync_s : CPU_SYNC_S,
    };
}

const tri_gpu_kind *tri_gpu_lookup(const char *name) {
    for (size_t i = 0; i < sizeof gpu_table / sizeof gpu_table[0]; i++)
        if (!strcmp(gpu_table[i].name, name)) return &gpu_table[i];
    return NULL;
}
