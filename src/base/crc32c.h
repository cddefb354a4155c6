/* CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial value and
 * final xor 0xFFFFFFFF), the checksum of the checkpoint manifest. Chosen for
 * its one-instruction hardware form on x86-64 (SSE4.2 crc32, picked at run
 * time) and a standard check value: tri_crc32c(0, "123456789", 9) ==
 * 0xE3069283. */
#ifndef TRI_BASE_CRC32C_H
#define TRI_BASE_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC of the bytes that gave `crc` followed by data[n]: start with 0,
 * feed the chunks in order (tri_crc32c(tri_crc32c(0, a, na), b, nb) is the
 * CRC of a then b). data may be NULL when n == 0. */
uint32_t tri_crc32c(uint32_t crc, const void *data, size_t n);

/* The same, table-driven, without the hardware instruction (what runs where
 * SSE4.2 is missing; tested against the hardware path). */
uint32_t tri_crc32c_sw(uint32_t crc, const void *data, size_t n);

#endif
