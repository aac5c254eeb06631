/* daemon/kv/crc32c.h — CRC32C (Castagnoli), the checksum of an offloaded
 * block: SSE4.2's crc32 instruction where the CPU has it, a slicing-by-8
 * table otherwise, picked once at run time. */
#ifndef PAGODA_CRC32C_H
#define PAGODA_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* crc of buf[0, len) continuing from crc (0 to start). */
uint32_t crc32c(uint32_t crc, const void *buf, size_t len);
/* The table path alone, for tests that compare the two. */
uint32_t crc32c_sw(uint32_t crc, const void *buf, size_t len);

#endif
