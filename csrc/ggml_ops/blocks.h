// ggml's block layouts, as a GGUF file stores them, and the activation blocks llama.cpp rounds
// its inputs to before an integer dot product. Every struct's size is checked at compile time:
// a row of a GGUF tensor is an array of these, read in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace i4p {

constexpr int QK = 32;    // values per block of the small types
constexpr int QK_K = 256; // values per super-block of the K-quants

// GGUF type ids (ggml_type) of the types the operators hold.
enum GgmlType : int {
    T_F32 = 0,
    T_F16 = 1,
    T_Q4_0 = 2,
    T_Q4_1 = 3,
    T_Q5_0 = 6,
    T_Q5_1 = 7,
    T_Q8_0 = 8,
    T_Q2_K = 10,
    T_Q3_K = 11,
    T_Q4_K = 12,
    T_Q5_K = 13,
    T_Q6_K = 14,
    T_IQ4_NL = 20,
    T_IQ4_XS = 23,
    T_BF16 = 30,
    T_MXFP4 = 39,
};

using f16_bits = uint16_t;

struct BlockQ4_0 { f16_bits d; uint8_t qs[QK / 2]; };
struct BlockQ4_1 { f16_bits d, m; uint8_t qs[QK / 2]; };
struct BlockQ5_0 { f16_bits d; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct BlockQ5_1 { f16_bits d, m; uint8_t qh[4]; uint8_t qs[QK / 2]; };
struct BlockQ8_0 { f16_bits d; int8_t qs[QK]; };
struct BlockQ2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; f16_bits d, dmin; };
struct BlockQ3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; f16_bits d; };
struct BlockQ4_K { f16_bits d, dmin; uint8_t scales[12]; uint8_t qs[QK_K / 2]; };
struct BlockQ5_K { f16_bits d, dmin; uint8_t scales[12]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct BlockQ6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; f16_bits d; };
struct BlockIQ4_NL { f16_bits d; uint8_t qs[QK / 2]; };
struct BlockIQ4_XS { f16_bits d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
struct BlockMXFP4 { uint8_t e; uint8_t qs[QK / 2]; };

static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block");
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block");
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block");
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block");
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block");
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block");
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block");
static_assert(sizeof(BlockIQ4_NL) == 18, "IQ4_NL block");
static_assert(sizeof(BlockIQ4_XS) == 136, "IQ4_XS block");
static_assert(sizeof(BlockMXFP4) == 17, "MXFP4 block");

// Activation blocks: q8_0 for the 32-value types, q8_1 (with d * sum of codes) for Q4_1/Q5_1,
// q8_K (float scale, sums of each 16 codes) for the K-quants and IQ4_XS. llama.cpp stores the q8_0 /
// q8_1 scales as float16; these hold the same float16 values widened once to float32, so a kernel
// reads them without a conversion per block.
struct ActQ8_0 { float d; int32_t sum; int8_t qs[QK]; };  // sum: of the codes (kernels over offset codes)
struct ActQ8_1 { float d, s; int8_t qs[QK]; };
struct ActQ8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

static_assert(sizeof(ActQ8_0) == 40, "q8_0 block");
static_assert(sizeof(ActQ8_1) == 40, "q8_1 block");

// A float32 rounded to float16 and back: the value llama.cpp's float16 field holds.
float f16_round(float x);
static_assert(sizeof(ActQ8_K) == 292, "q8_K block");

// The non-uniform 4-bit grids: IQ4_NL / IQ4_XS codes, and MXFP4's e2m1 values doubled (the
// scale is half of 2^(e-127), so the products stay integers).
constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
constexpr int8_t kMXFP4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

inline float f16_to_f32(f16_bits h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1Fu;
    uint32_t mant = h & 0x3FFu;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            bits = sign | ((127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7F800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

// Round to nearest even, as IEEE conversion does (and as F16C's vcvtps2ph with mode 0).
inline f16_bits f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t absx = x & 0x7FFFFFFFu;
    if (absx > 0x7F800000u) return static_cast<f16_bits>(sign | 0x7E00u);  // NaN
    if (absx >= 0x477FF000u) return static_cast<f16_bits>(sign | 0x7C00u);  // overflow (after rounding) -> inf
    if (absx < 0x38800000u) {  // subnormal half (or zero)
        if (absx < 0x33000000u) return static_cast<f16_bits>(sign);
        const uint32_t exp = absx >> 23;
        const uint32_t mant = (absx & 0x7FFFFFu) | 0x800000u;
        const uint32_t shift = 126 - exp;  // 14 + (113 - exp)
        uint32_t half = mant >> (shift);
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) ++half;
        return static_cast<f16_bits>(sign | half);
    }
    uint32_t half = ((absx >> 13) - (112u << 10));
    const uint32_t rem = absx & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
    return static_cast<f16_bits>(sign | half);
}

inline float bf16_to_f32(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

// ggml's float -> bf16: round to nearest even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 64);
    return static_cast<uint16_t>((x + (0x7FFFu + ((x >> 16) & 1u))) >> 16);
}

// Half of 2^(e - 127) (ggml's e8m0 "half" scale of MXFP4), subnormal below e = 2.
inline float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? (0x00200000u << e) : (static_cast<uint32_t>(e - 1) << 23);
    float out;
    std::memcpy(&out, &bits, 4);
    return out;
}

inline f16_bits load_f16(const void* p) {
    f16_bits h;
    std::memcpy(&h, p, 2);
    return h;
}

// The 6-bit scale and minimum of sub-block j of a Q4_K / Q5_K super-block.
inline void k_scale_min(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// The sixteen 6-bit signed sub-block scales of a Q3_K super-block (12 packed bytes), minus 32.
inline void q3_k_scales(const uint8_t* p, int8_t* out) {
    for (int j = 0; j < 16; ++j) {
        const int lo = j < 8 ? (p[j] & 0xF) : (p[j - 8] >> 4);
        const int hi = (p[8 + (j % 4)] >> (2 * (j / 4))) & 3;
        out[j] = static_cast<int8_t>((lo | (hi << 4)) - 32);
    }
}

// The 6-bit signed scale of sub-block j of an IQ4_XS super-block, minus 32.
inline int iq4_xs_scale(const BlockIQ4_XS* x, int j) {
    const int lo = (x->scales_l[j / 2] >> (4 * (j % 2))) & 0xF;
    const int hi = (x->scales_h >> (2 * j)) & 3;
    return (lo | (hi << 4)) - 32;
}

// Eight rows of a type, interleaved at each super-block index: made once from the file's blocks
// (repack.cpp) for kernels that multiply eight weight rows at a time, holding the same integers.
constexpr int kPackRows = 8;

// Q4_K x 8: the eight rows' scales, minimums and code bytes of one super-block index, arranged so
// one 32-byte load holds four code bytes of each row (a row per 32-bit lane). The 6-bit scales and
// minimums stay packed as the file holds them (unpacked they would cost 32 bytes more a block, 2.8 %
// of a model that is nearly all Q4_K), byte i of the eight rows side by side: one 32-byte load then
// holds bytes 4 n .. 4 n + 3 of every row, and a kernel unpacks all eight rows with a few shifts and
// masks of three such loads (k_scale_min's rule, a byte per lane).
struct BlockQ4Kx8 {
    f16_bits d[kPackRows], dmin[kPackRows];  // as stored
    uint8_t scales[12][kPackRows];           // [byte][row]: each row's 12 bytes of scales and minimums, as stored
    uint8_t qs[4][8][4 * kPackRows];         // [32-byte chunk][4-byte group][row * 4 + byte]: the code bytes
};
static_assert(sizeof(BlockQ4Kx8) == 8 * 144, "Q4_K x 8 block: the rows' bytes, rearranged");

// Q6_K x 8: value 128 n + 32 m + 4 g + t of a row has its low four bits in byte 4 g + t of q[n][g][m % 2]
// (the low nibble for m < 2, the high one after) and its top two at bits 2 m of q[n][g][2]'s byte 4 g + t;
// the three 32-byte pieces a kernel takes together lie together, so it reads the block straight through.
struct BlockQ6Kx8 {
    f16_bits d[kPackRows];                   // as stored
    int8_t scales[8][kPackRows][2];          // [pair of 16-value sub-blocks][row][first or second]
    uint8_t q[2][8][3][4 * kPackRows];       // [128-value half][4-byte group][ql low, ql high, qh][row * 4 + byte]
};
static_assert(sizeof(BlockQ6Kx8) == 8 * 210, "Q6_K x 8 block: the rows' bytes, rearranged");

// The 32-value types x 8: each row's float16 scale (MXFP4: its exponent; Q4_1's minimum, Q5_0's 32 high
// bits) as stored,
// then the codes with byte 4 g + t of each row in lane `row` of qs[g] (for the nibble types the low
// nibble is value 4 g + t, the high one value 16 + 4 g + t).
struct BlockQ4_0x8 { f16_bits d[kPackRows]; uint8_t qs[4][4 * kPackRows]; };
struct BlockQ4_1x8 { f16_bits d[kPackRows], m[kPackRows]; uint8_t qs[4][4 * kPackRows]; };
struct BlockQ5_0x8 { f16_bits d[kPackRows]; uint32_t qh[kPackRows]; uint8_t qs[4][4 * kPackRows]; };
struct BlockQ8_0x8 { f16_bits d[kPackRows]; int8_t qs[8][4 * kPackRows]; };
struct BlockMXFP4x8 { uint8_t e[kPackRows]; uint8_t qs[4][4 * kPackRows]; };  // e: each row's e8m0 exponent
static_assert(sizeof(BlockQ4_0x8) == 8 * 18 && sizeof(BlockQ4_1x8) == 8 * 20, "Q4_0 / Q4_1 x 8: the rows' bytes");
static_assert(sizeof(BlockQ5_0x8) == 8 * 22 && sizeof(BlockQ8_0x8) == 8 * 34, "Q5_0 / Q8_0 x 8: the rows' bytes");
static_assert(sizeof(BlockMXFP4x8) == 8 * 17, "MXFP4 x 8: the rows' bytes");

// Type facts: values per block, bytes per block, and which activation block it pairs with.
enum class Act { F32, F16, BF16, Q8_0, Q8_1, Q8_K };

struct TypeInfo {
    int values;
    int bytes;
    Act act;
    const char* name;
};

// Null when the type is not one the operators hold.
const TypeInfo* type_info(int type);

}  // namespace i4p
