/* The NCCL transport's pure logic (see nccl_plan.h). */
#include "parallel/nccl_plan.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tri_nccl_dtype(tri_dtype t) {
    switch (t) {
    case TRI_F32: return TRI_NCCL_FLOAT32;
    case TRI_F64: return TRI_NCCL_FLOAT64;
    case TRI_BF16: return TRI_NCCL_BFLOAT16;
    case TRI_F16: return TRI_NCCL_FLOAT16;
    case TRI_I32: return TRI_NCCL_INT32;
    case TRI_U8: return TRI_NCCL_UINT8;
    }
    return -1;
}

size_t tri_nccl_dtype_bytes(int nccl_type) {
    switch (nccl_type) {
    case TRI_NCCL_INT8:
    case TRI_NCCL_UINT8: return 1;
    case TRI_NCCL_FLOAT16:
    case TRI_NCCL_BFLOAT16: return 2;
    case TRI_NCCL_INT32:
    case TRI_NCCL_UINT32:
    case TRI_NCCL_FLOAT32: return 4;
    case TRI_NCCL_INT64:
    case TRI_NCCL_UINT64:
    case TRI_NCCL_FLOAT64: return 8;
    default: return 0;
    }
}

int tri_nccl_redop(tri_redop op) {
    switch (op) {
    case TRI_SUM: return TRI_NCCL_SUM;
    case TRI_MAX: return TRI_NCCL_MAX;
    }
    return -1;
}

void tri_nccl_split_args(const tri_mesh *m, tri_group_kind kind, int *color, int *key) {
    int idx = -1;
    switch (kind) {
    case TRI_GROUP_TP: idx = m->tp_rank; break;
    case TRI_GROUP_DP: idx = m->dp_rank; break;
    case TRI_GROUP_PP: idx = m->pp_rank; break;
    case TRI_GROUP_EMB: idx = m->pp_rank == 0 ? 0 : m->pp_rank == m->pp - 1 ? 1 : -1; break;
    case TRI_GROUP_MP: idx = m->tp_rank + m->tp * m->pp_rank; break;
    case TRI_GROUP_CP: idx = m->cp_rank; break;
    case TRI_GROUP_DPCP: idx = m->cp_rank + m->cp * m->dp_rank; break;
    default: break;
    }
    int c = tri_mesh_color(m, kind);
    *color = c < 0 || idx < 0 ? TRI_NCCL_NOCOLOR : c;
    *key = idx < 0 ? 0 : idx;
}

/* ------------------------------------------------------------------------ */

void tri_p2p_init(tri_p2p_batcher *b) { memset(b, 0, sizeof *b); }

void tri_p2p_free(tri_p2p_batcher *b) {
    if (b == NULL) return;
    free(b->refs);
    free(b->fenced);
    memset(b, 0, sizeof *b);
}

/* A free slot (no pending request, not the open group's), or a new one. */
static int take_slot(tri_p2p_batcher *b, tri_nccl_step *st) {
    for (int i = 0; i < b->n_slots; i++)
        if (b->refs[i] == 0 && !(b->open && b->open_slot == i)) {
            st->new_slot = 0;
            b->fenced[i] = 0; /* a new use of its event */
            return i;
        }
    if (b->n_slots == b->cap) {
        int cap = b->cap ? 2 * b->cap : 8;
        int *n = realloc(b->refs, (size_t)cap * sizeof *n);
        if (n == NULL) return -1;
        b->refs = n;
        int *f = realloc(b->fenced, (size_t)cap * sizeof *f);
        if (f == NULL) return -1;
        b->fenced = f;
        b->cap = cap;
    }
    b->refs[b->n_slots] = 0;
    b->fenced[b->n_slots] = 0;
    st->new_slot = 1;
    return b->n_slots++;
}

static void close_into(tri_p2p_batcher *b, tri_nccl_step *st) {
    st->close_group = 0;
    if (!b->open) return;
    st->close_group = 1;
    st->close_slot = b->open_slot;
    st->close_comm = b->open_comm;
    b->open = 0;
    b->groups_closed++;
}

int tri_p2p_post(tri_p2p_batcher *b, int comm, tri_nccl_step *st) {
    memset(st, 0, sizeof *st);
    if (b->open && b->open_comm != comm) close_into(b, st);
    if (!b->open) {
        int s = take_slot(b, st);
        if (s < 0) return -1;
        b->open = 1;
        b->open_comm = comm;
        b->open_slot = s;
        b->open_calls = 0;
        st->group_start = 1;
    }
    b->open_calls++;
    b->refs[b->open_slot]++;
    st->slot = b->open_slot;
    return 0;
}

int tri_p2p_collective(tri_p2p_batcher *b, int comm, tri_nccl_step *st) {
    (void)comm;
    memset(st, 0, sizeof *st);
    close_into(b, st);
    int s = take_slot(b, st);
    if (s < 0) return -1;
    b->refs[s] = 1;
    st->slot = s;
    return 0;
}

int tri_p2p_close(tri_p2p_batcher *b, int *slot, int *comm) {
    tri_nccl_step st;
    close_into(b, &st);
    if (!st.close_group) return 0;
    *slot = st.close_slot;
    *comm = st.close_comm;
    return 1;
}

int tri_p2p_fence(tri_p2p_batcher *b, int slot) {
    if (slot < 0 || slot >= b->n_slots || (b->open && b->open_slot == slot)) return -1;
    if (b->fenced[slot]) return 0;
    b->fenced[slot] = 1;
    return 1;
}

void tri_p2p_done(tri_p2p_batcher *b, int slot) {
    if (slot >= 0 && slot < b->n_slots && b->refs[slot] > 0) b->refs[slot]--;
}

int tri_p2p_refs(const tri_p2p_batcher *b, int slot) { return slot >= 0 && slot < b->n_slots ? b->refs[slot] : 0; }

char *tri_nccl_fail_msg(char *buf, size_t n, const char *group, const char *call, const char *file, int line,
                        const char *why) {
    if (group && *group)
        snprintf(buf, n, "%s failed at %s:%d (group %s): %s", call, file, line, group, why);
    else
        snprintf(buf, n, "%s failed at %s:%d: %s", call, file, line, why);
    return buf;
}
