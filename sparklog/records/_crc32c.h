/* CRC-32C for the record kernels (records/_walk.pxd declares it; each kernel that checks a batch calls
   sparklog_crc32c_init() once, at its import). */
#ifndef SPARKLOG_CRC32C_H
#define SPARKLOG_CRC32C_H
#include <stdint.h>
#include <string.h>
/* CRC-32C (Castagnoli, reflected 0x82F63B78), as the crc32c package computes it: with the SSE4.2
   instruction where the CPU has it, over three independent streams at once (its latency is three times
   its throughput), joined by shifting a CRC over the zero bytes of the streams after it (the GF(2) matrix
   method); a byte table elsewhere. */
#define SPARKLOG_CRC_POLY 0x82F63B78u
#define SPARKLOG_CRC_LONG 4096
#define SPARKLOG_CRC_SHORT 256
static uint32_t sparklog_crc32c_table[256];
static uint32_t sparklog_crc32c_long[4][256], sparklog_crc32c_short[4][256];
static int sparklog_crc32c_hw = -1;
static uint32_t sparklog_gf2_times(const uint32_t* mat, uint32_t vec) {
    uint32_t sum = 0;
    while (vec) { if (vec & 1) sum ^= *mat; vec >>= 1; mat++; }
    return sum;
}
static void sparklog_gf2_square(uint32_t* square, const uint32_t* mat) {
    for (int n = 0; n < 32; n++) square[n] = sparklog_gf2_times(mat, mat[n]);
}
/* The operator appending `len` zero bytes (a power of two) to a CRC register, as four byte tables. */
static void sparklog_crc32c_zeros(uint32_t zeros[4][256], size_t len) {
    uint32_t odd[32], even[32], row = 1, *op;
    odd[0] = SPARKLOG_CRC_POLY;
    for (int n = 1; n < 32; n++) { odd[n] = row; row <<= 1; }
    sparklog_gf2_square(even, odd);  /* two zero bits */
    sparklog_gf2_square(odd, even);  /* four */
    op = odd;
    for (;;) {  /* each squaring doubles the zeros: 8 bits, then 16, ... */
        sparklog_gf2_square(even, odd); op = even; len >>= 1; if (!len) break;
        sparklog_gf2_square(odd, even); op = odd; len >>= 1; if (!len) break;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++) zeros[k][n] = sparklog_gf2_times(op, n << (8 * k));
}
static inline uint32_t sparklog_crc32c_shift(uint32_t zeros[4][256], uint32_t crc) {
    return zeros[0][crc & 0xFF] ^ zeros[1][(crc >> 8) & 0xFF] ^ zeros[2][(crc >> 16) & 0xFF] ^ zeros[3][crc >> 24];
}
static void sparklog_crc32c_init(void) {
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ SPARKLOG_CRC_POLY : c >> 1;
        sparklog_crc32c_table[n] = c;
    }
    sparklog_crc32c_zeros(sparklog_crc32c_long, SPARKLOG_CRC_LONG);
    sparklog_crc32c_zeros(sparklog_crc32c_short, SPARKLOG_CRC_SHORT);
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    sparklog_crc32c_hw = __builtin_cpu_supports("sse4.2") != 0;
#else
    sparklog_crc32c_hw = 0;
#endif
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2")))
static uint64_t sparklog_crc32c_streams(uint64_t c0, const uint8_t** at, size_t* left, size_t block,
                                        uint32_t zeros[4][256]) {
    const uint8_t* p = *at;
    while (*left >= 3 * block) {
        uint64_t c1 = 0, c2 = 0, v;
        const uint8_t* end = p + block;
        do {
            memcpy(&v, p, 8); c0 = __builtin_ia32_crc32di(c0, v);
            memcpy(&v, p + block, 8); c1 = __builtin_ia32_crc32di(c1, v);
            memcpy(&v, p + 2 * block, 8); c2 = __builtin_ia32_crc32di(c2, v);
            p += 8;
        } while (p < end);
        c0 = sparklog_crc32c_shift(zeros, (uint32_t)c0) ^ c1;
        c0 = sparklog_crc32c_shift(zeros, (uint32_t)c0) ^ c2;
        p += 2 * block;
        *left -= 3 * block;
    }
    *at = p;
    return c0;
}
__attribute__((target("sse4.2")))
static uint32_t sparklog_crc32c_sse42(uint32_t crc, const uint8_t* p, size_t n) {
    uint64_t c = sparklog_crc32c_streams(crc, &p, &n, SPARKLOG_CRC_LONG, sparklog_crc32c_long), v;
    c = sparklog_crc32c_streams(c, &p, &n, SPARKLOG_CRC_SHORT, sparklog_crc32c_short);
    while (n >= 8) { memcpy(&v, p, 8); c = __builtin_ia32_crc32di(c, v); p += 8; n -= 8; }
    while (n--) c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    return (uint32_t)c;
}
#endif
static uint32_t sparklog_crc32c(const uint8_t* p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (sparklog_crc32c_hw == 1) return sparklog_crc32c_sse42(c, p, n) ^ 0xFFFFFFFFu;
#endif
    while (n--) c = sparklog_crc32c_table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}
#endif
