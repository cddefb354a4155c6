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
     * ConnectX-7 port per GPU (50 GB/s each way). */
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
     .flash = 1},
    /* NVIDIA A100 SXM4 80GB datasheet: 312 TFLOP/s dense BF16, 156 TF32,
     * 80 GB HBM2e at 2.039 TB/s, NVLink 600 GB/s (300 each way); DGX A100:
     * 8 GPUs, eight 200 Gb/s HDR ports (25 GB/s each way per GPU). */
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
     .flash = 1},
};

const tri_gpu_kind *tri_gpu_lookup(const char *name) {
    for (size_t i = 0; i < sizeof gpu_table / sizeof gpu_table[0]; i++)
        if (!strcmp(gpu_table[i].name, name)) return &gpu_table[i];
    return NULL;
}
