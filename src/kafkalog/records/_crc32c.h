/* CRC-32C (Castagnoli) for the compiled walks that run without the GIL.
 *
 * Why hand-written: the crc32c package is the checksum everywhere else, but it is a Python call
 * (it needs the GIL), and the producer-batch check verifies a batch's CRC inside one GIL-free
 * walk. On x86-64 with SSE4.2 this is the CPU's crc32 instruction, 8 bytes a step; elsewhere a
 * byte-wise table. Refuses: anything but the Castagnoli polynomial (v0/v1 messages use zlib's).
 * tests/test_leader_check.py checks it against the crc32c package.
 */
#ifndef KAFKALOG_CRC32C_H
#define KAFKALOG_CRC32C_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc32c_table[256];
static int crc32c_hardware = -1; /* -1: not yet decided; crc32c_init decides, under the GIL */

static void crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc32c_table[n] = c;
    }
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    crc32c_hardware = __builtin_cpu_supports("sse4.2") ? 1 : 0;
#else
    crc32c_hardware = 0;
#endif
}

static uint32_t crc32c_software(uint32_t crc, const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++) crc = crc32c_table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
    return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) static uint32_t crc32c_sse42(uint32_t crc, const uint8_t *p,
                                                                 size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
    }
    uint32_t c32 = (uint32_t)c;
    for (; n > 0; n--, p++) c32 = __builtin_ia32_crc32qi(c32, *p);
    return c32;
}
#endif

/* The CRC-32C of p[0:n], as the crc32c package's crc32c(data) answers it. */
static inline uint32_t crc32c_of(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (crc32c_hardware == 1) return crc32c_sse42(crc, p, n) ^ 0xFFFFFFFFu;
#endif
    return crc32c_software(crc, p, n) ^ 0xFFFFFFFFu;
}

#endif
