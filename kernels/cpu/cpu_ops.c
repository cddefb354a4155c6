/* The CPU backend's op table. Each op lives in the file of its family
 * (matmul.c, layernorm.c, attention.c, gelu.c, embedding.c, crossentropy.c,
 * adamw.c, elementwise.c). */
#include "kernels/cpu/cpu_internal.h"

#include <omp.h>
#include <xmmintrin.h>

#define MXCSR_DAZ 0x0040 /* denormal inputs read as zero */

static void cpu_init(int threads)
{
    if (threads > 0)
        omp_set_num_threads(threads);
    /* MXCSR is per thread: set it on every thread of the pool; threads the
     * pool adds later are created by this thread and inherit it */
    #pragma omp parallel
    _mm_setcsr(_mm_getcsr() | _MM_FLUSH_ZERO_ON | MXCSR_DAZ);
}

static const tri_ops CPU_OPS = {
    .name = "cpu",
    .init = cpu_init,
    .alloc = tri_cpu_alloc,
    .free = tri_cpu_free,
    .copy = tri_cpu_copy,
    .zero = tri_cpu_zero,
    .sync = tri_cpu_sync,
    .matmul_fwd = tri_cpu_matmul_fwd,
    .matmul_bwd = tri_cpu_matmul_bwd,
    .layernorm_fwd = tri_cpu_layernorm_fwd,
    .layernorm_bwd = tri_cpu_layernorm_bwd,
    .attention_fwd = tri_cpu_attention_fwd,
    .attention_bwd = tri_cpu_attention_bwd,
    .attention_scratch_floats = tri_cpu_attention_scratch_floats,
    .gelu_fwd = tri_cpu_gelu_fwd,
    .gelu_bwd = tri_cpu_gelu_bwd,
    .residual_fwd = tri_cpu_residual_fwd,
    .bias_bwd = tri_cpu_bias_bwd,
    .embedding_fwd = tri_cpu_embedding_fwd,
    .embedding_bwd = tri_cpu_embedding_bwd,
    .crossentropy_stats = tri_cpu_crossentropy_stats,
    .crossentropy_bwd = tri_cpu_crossentropy_bwd,
    .adamw = tri_cpu_adamw,
    .sumsq = tri_cpu_sumsq,
    .scale = tri_cpu_scale,
    .add = tri_cpu_add,
};

/* The CPU backend: a static table, valid for the life of the program. */
const tri_ops *tri_ops_cpu(void)
{
    return &CPU_OPS;
}
