/* The context's start-up (kernels/ctx.h): on a table by name (tri_ctx_init)
 * or on a given table (tri_ctx_init_ops), and the refusal of a table built
 * against another tri_ctx (a CUDA module of another build). */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <string.h>

#include "kernels/ctx.h"

Test(ctx_init, a_context_on_a_given_table_is_the_one_by_name) {
    tri_ctx a, b;
    cr_assert_eq(tri_ctx_init(&a, "cpu", 1), 0);
    cr_assert_eq(tri_ctx_init_ops(&b, tri_ops_cpu(), 1), 0);
    cr_expect(a.ops == tri_ops_cpu() && b.ops == tri_ops_cpu());
    cr_expect(b.act_dtype == TRI_F32 && b.param_dtype == TRI_F32 && b.grad_dtype == TRI_F32);
    void *p = tri_ctx_alloc(&b, 64, TRI_MEM_OTHER, "probe");
    cr_expect(p != NULL && b.mem.bytes[TRI_MEM_OTHER] == 64);
    tri_ctx_release(&b, p, 64, TRI_MEM_OTHER);
    tri_ctx_free(&a);
    tri_ctx_free(&b);
}

static int init_calls;
static int counting_init(tri_ctx *c, int threads) {
    init_calls++;
    return 0;
}

/* One line naming the backend and both sizes; the table's init never runs
 * and the context is left empty. */
Test(ctx_init, a_table_built_against_another_context_is_refused, .init = cr_redirect_stderr) {
    tri_ops other = *tri_ops_cpu();
    other.name = "stale";
    other.ctx_size = sizeof(tri_ctx) + 8;
    other.init = counting_init;
    tri_ctx c;
    memset(&c, 0xff, sizeof c);
    cr_expect_eq(tri_ctx_init_ops(&c, &other, 1), -1);
    cr_expect_eq(init_calls, 0);
    cr_expect(c.ops == NULL && c.backend == NULL);
    fflush(stderr);
    FILE *f = cr_get_redirected_stderr();
    char line[512] = {0}, more[64] = {0}, want[128];
    cr_assert(fgets(line, sizeof line, f) != NULL);
    cr_expect(fgets(more, sizeof more, f) == NULL, "more than one line: %s%s", line, more);
    snprintf(want, sizeof want, "its tri_ctx has %zu bytes, this program's %zu", sizeof(tri_ctx) + 8, sizeof(tri_ctx));
    const char *head = "trident: --device stale: the backend was built from another version of Trident";
    cr_expect(strncmp(line, head, strlen(head)) == 0, "%s", line);
    cr_expect(strstr(line, want) != NULL, "%s", line);
}
