/* The group of one (parallel/comm.h). A file of its own, with no state and
 * no dependency beyond libc, so that the CUDA module (libtri_cuda.so, whose
 * NCCL transport makes groups of one, see CMakeLists.txt) can carry a copy. */
#include "parallel/comm.h"

#include <string.h>

void tri_comm_init_self(tri_comm *c, int world_rank) {
    memset(c, 0, sizeof *c);
    c->size = 1;
    c->rank = 0;
    c->world_rank = world_rank;
}
