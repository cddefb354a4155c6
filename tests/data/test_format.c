/* data/format: the token dtypes (bytes, largest id, names), the format
 * names, and the unaligned little-endian loads, against values written out
 * independently (Megatron's dtype table, byte patterns). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "data/format.h"

Test(format, dtype_codes_are_megatrons_with_sizes_and_ranges) {
    static const struct {
        int code, bytes;
        int64_t max;
        const char *name;
    } want[] = {{1, 1, 255, "uint8"},
                {2, 1, 127, "int8"},
                {3, 2, 32767, "int16"},
                {4, 4, 2147483647, "int32"},
                {5, 8, INT64_MAX, "int64"},
                {8, 2, 65535, "uint16"},
                {100, 4, 4294967295LL, "uint32"}};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        cr_assert_eq(tri_dtype_bytes(want[k].code), want[k].bytes, "code %d", want[k].code);
        cr_assert_eq(tri_dtype_max(want[k].code), want[k].max, "code %d", want[k].code);
        cr_assert_str_eq(tri_dtype_name(want[k].code), want[k].name);
    }
    cr_assert_eq(TRI_DT_U16, 8);
    cr_assert_eq(TRI_DT_I32, 4);
}

Test(format, float_and_unknown_codes_are_not_token_types) {
    static const int codes[] = {0, 6, 7, 9, 99, 101, -1};
    for (size_t k = 0; k < sizeof codes / sizeof codes[0]; k++) {
        cr_assert_eq(tri_dtype_bytes(codes[k]), 0, "code %d", codes[k]);
        cr_assert_eq(tri_dtype_max(codes[k]), 0, "code %d", codes[k]);
    }
    cr_assert_str_eq(tri_dtype_name(6), "float64");
    cr_assert_str_eq(tri_dtype_name(7), "float32");
    cr_assert_str_eq(tri_dtype_name(9), "unknown");
}

Test(format, format_names) {
    cr_assert_str_eq(tri_data_format_name(TRI_DATA_LLMC), "llm.c");
    cr_assert_str_eq(tri_data_format_name(TRI_DATA_MEGATRON), "megatron");
    cr_assert_str_eq(tri_data_format_name(0), "unknown");
}

Test(format, little_endian_loads_at_any_alignment) {
    unsigned char buf[24];
    for (int i = 0; i < 24; i++) buf[i] = (unsigned char)(0x10 + i);
    for (int off = 0; off < 8; off++) {
        const unsigned char *p = buf + off;
        uint64_t u = 0;
        for (int b = 7; b >= 0; b--) u = u << 8 | p[b];
        uint32_t w = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
        cr_assert_eq(tri_ld_u64(p), u, "offset %d", off);
        cr_assert_eq(tri_ld_i64(p), (int64_t)u, "offset %d", off);
        cr_assert_eq(tri_ld_i32(p), (int32_t)w, "offset %d", off);
    }
    const unsigned char neg[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};
    cr_assert_eq(tri_ld_i32(neg), -1);
    cr_assert_eq(tri_ld_i64(neg), -1);
}

Test(format, megatron_header_offsets_add_up) {
    cr_assert_eq(TRI_MMIDX_MAGIC_LEN, 9);
    cr_assert_eq(memcmp(TRI_MMIDX_MAGIC, "MMIDIDX\0\0", 9), 0);
    cr_assert_eq(TRI_MMIDX_OFF_VERSION, TRI_MMIDX_MAGIC_LEN);
    cr_assert_eq(TRI_MMIDX_OFF_DTYPE, TRI_MMIDX_OFF_VERSION + 8);
    cr_assert_eq(TRI_MMIDX_OFF_N, TRI_MMIDX_OFF_DTYPE + 1);
    cr_assert_eq(TRI_MMIDX_OFF_D, TRI_MMIDX_OFF_N + 8);
    cr_assert_eq(TRI_MMIDX_HEADER_BYTES, TRI_MMIDX_OFF_D + 8);
    cr_assert_eq(TRI_LLMC_HEADER_BYTES, 1024);
}
