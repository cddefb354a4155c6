/* src/base/crc32c: against published check values (the CRC catalogue's
 * "123456789" and the iSCSI vectors of RFC 3720 B.4) and a bit-at-a-time
 * reference written from the definition, on buffers of awkward lengths and
 * alignments, whole and in chunks; the hardware and table paths must agree. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "base/crc32c.h"

/* straight from the definition: reflected, poly 0x82F63B78, init/xorout ~0 */
static uint32_t crc_bitwise(const unsigned char *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int b = 0; b < 8; b++) c = (c & 1u) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
    }
    return ~c;
}

Test(crc32c, published_check_values) {
    cr_assert_eq(tri_crc32c(0, "123456789", 9), 0xe3069283u);
    cr_assert_eq(tri_crc32c_sw(0, "123456789", 9), 0xe3069283u);
    unsigned char buf[32];
    memset(buf, 0, sizeof buf);
    cr_assert_eq(tri_crc32c(0, buf, 32), 0x8a9136aau);
    memset(buf, 0xff, sizeof buf);
    cr_assert_eq(tri_crc32c(0, buf, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    cr_assert_eq(tri_crc32c(0, buf, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    cr_assert_eq(tri_crc32c(0, buf, 32), 0x113fdb5cu);
    cr_assert_eq(tri_crc32c(0, NULL, 0), 0u);
}

Test(crc32c, agrees_with_the_bitwise_definition_whole_and_in_chunks) {
    enum { N = 5003 };
    static unsigned char buf[N + 8];
    uint64_t s = 42;
    for (size_t i = 0; i < sizeof buf; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        buf[i] = (unsigned char)(s >> 56);
    }
    size_t lens[] = {0, 1, 7, 8, 9, 15, 63, 64, 65, 1000, 4097, N};
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++)
        for (size_t off = 0; off < 8; off += 3) {
            const unsigned char *p = buf + off;
            size_t n = lens[k];
            uint32_t want = crc_bitwise(p, n);
            cr_assert_eq(tri_crc32c(0, p, n), want, "len %zu offset %zu", n, off);
            cr_assert_eq(tri_crc32c_sw(0, p, n), want, "table path, len %zu offset %zu", n, off);
            /* in uneven chunks */
            uint32_t c = 0;
            size_t done = 0, step = 1;
            while (done < n) {
                size_t take = n - done < step ? n - done : step;
                c = tri_crc32c(c, p + done, take);
                done += take;
                step = step * 3 + 1;
            }
            cr_assert_eq(c, want, "chunked, len %zu offset %zu", n, off);
        }
}
