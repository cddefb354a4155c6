/* Tensor parallelism's communication (parallel/tensor.h). */
#include "parallel/tensor.h"

size_t tri_tp_rows(const tri_tp_region *r, size_t BT) { return r->sp ? BT / (size_t)r->tp : BT; }

void *tri_tp_reduce(const tri_tp_region *r, void *full, void *shard, size_t BT) {
    if (!r->sp) {
        tri_comm_allreduce(r->comm, full, BT * r->C, r->dtype, TRI_SUM);
        return full;
    }
    tri_comm_reduce_scatter(r->comm, shard, full, tri_tp_rows(r, BT) * r->C, r->dtype);
    return shard;
}

const void *tri_tp_gather(const tri_tp_region *r, void *full, const void *shard, size_t BT) {
    if (!r->sp) return shard;
    tri_comm_allgather(r->comm, full, shard, tri_tp_rows(r, BT) * r->C, r->dtype);
    return full;
}
