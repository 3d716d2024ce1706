// The scalar reference of every kernel: plain C++, correct on any CPU. Compiled without
// floating-point contraction (see the build), so a dequantized value is the product gguf's
// Python dequantize computes, bit for bit.
#include <cmath>
#include <cstring>

#include "kernels.h"

namespace i4p {

float f16_round(float x) { return f16_to_f32(f32_to_f16(x)); }

const TypeInfo* type_info(int type) {
    static const TypeInfo kF32{1, 4, Act::F32, "F32"};
    static const TypeInfo kF16{1, 2, Act::F16, "F16"};
    static const TypeInfo kBF16{1, 2, Act::BF16, "BF16"};
    static const TypeInfo kQ4_0{QK, 18, Act::Q8_0, "Q4_0"};
    static const TypeInfo kQ4_1{QK, 20, Act::Q8_1, "Q4_1"};
    static const TypeInfo kQ5_0{QK, 22, Act::Q8_0, "Q5_0"};
    static const TypeInfo kQ5_1{QK, 24, Act::Q8_1, "Q5_1"};
    static const TypeInfo kQ8_0{QK, 34, Act::Q8_0, "Q8_0"};
    static const TypeInfo kQ2_K{QK_K, 84, Act::Q8_K, "Q2_K"};
    static const TypeInfo kQ3_K{QK_K, 110, Act::Q8_K, "Q3_K"};
    static const TypeInfo kQ4_K{QK_K, 144, Act::Q8_K, "Q4_K"};
    static const TypeInfo kQ5_K{QK_K, 176, Act::Q8_K, "Q5_K"};
    static const TypeInfo kQ6_K{QK_K, 210, Act::Q8_K, "Q6_K"};
    static const TypeInfo kIQ4_NL{QK, 18, Act::Q8_0, "IQ4_NL"};
    static const TypeInfo kIQ4_XS{QK_K, 136, Act::Q8_K, "IQ4_XS"};
    static const TypeInfo kMXFP4{QK, 17, Act::Q8_0, "MXFP4"};
    switch (type) {
        case T_F32: return &kF32;
        case T_F16: return &kF16;
        case T_BF16: return &kBF16;
        case T_Q4_0: return &kQ4_0;
        case T_Q4_1: return &kQ4_1;
        case T_Q5_0: return &kQ5_0;
        case T_Q5_1: return &kQ5_1;
        case T_Q8_0: return &kQ8_0;
        case T_Q2_K: return &kQ2_K;
        case T_Q3_K: return &kQ3_K;
        case T_Q4_K: return &kQ4_K;
        case T_Q5_K: return &kQ5_K;
        case T_Q6_K: return &kQ6_K;
        case T_IQ4_NL: return &kIQ4_NL;
        case T_IQ4_XS: return &kIQ4_XS;
        case T_MXFP4: return &kMXFP4;
        default: return nullptr;
    }
}

// ------------------------------------------------------------------ codes of one block
// Each decoder writes a block's integer codes in value order and its float32 scale (and minimum)
// per sub-block of `sub` values, as gguf's dequantize computes them.

namespace {

void codes_q4_0(const uint8_t* b, int8_t* q) {
    auto* x = reinterpret_cast<const BlockQ4_0*>(b);
    for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>((x->qs[j] & 0xF) - 8);
        q[j + 16] = static_cast<int8_t>((x->qs[j] >> 4) - 8);
    }
}

void codes_q4_1(const uint8_t* b, int8_t* q) {
    auto* x = reinterpret_cast<const BlockQ4_1*>(b);
    for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>(x->qs[j] & 0xF);
        q[j + 16] = static_cast<int8_t>(x->qs[j] >> 4);
    }
}

uint32_t high_bits32(const uint8_t* qh) {
    uint32_t h;
    std::memcpy(&h, qh, 4);
    return h;
}

void codes_q5_0(const uint8_t* b, int8_t* q) {
    auto* x = reinterpret_cast<const BlockQ5_0*>(b);
    const uint32_t h = high_bits32(x->qh);
    for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>(((x->qs[j] & 0xF) | (((h >> j) & 1) << 4)) - 16);
        q[j + 16] = static_cast<int8_t>(((x->qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4)) - 16);
    }
}

void codes_q5_1(const uint8_t* b, int8_t* q) {
    auto* x = reinterpret_cast<const BlockQ5_1*>(b);
    const uint32_t h = high_bits32(x->qh);
    for (int j = 0; j < 16; ++j) {
        q[j] = static_cast<int8_t>((x->qs[j] & 0xF) | (((h >> j) & 1) << 4));
        q[j + 16] = static_cast<int8_t>((x->qs[j] >> 4) | (((h >> (j + 16)) & 1) << 4));
    }
}

void codes_grid(const uint8_t* qs, const int8_t* grid, int8_t* q) {
    for (int j = 0; j < 16; ++j) {
        q[j] = grid[qs[j] & 0xF];
        q[j + 16] = grid[qs[j] >> 4];
    }
}

// Q2_K: 16 sub-blocks of 16; codes 0..3; scale d * (sc & 15), minimum dmin * (sc >> 4)
void codes_q2_k(const BlockQ2_K* x, int8_t* q) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* qs = x->qs + 32 * half;
        for (int shift = 0; shift < 4; ++shift)
            for (int l = 0; l < 32; ++l) q[128 * half + 32 * shift + l] = static_cast<int8_t>((qs[l] >> (2 * shift)) & 3);
    }
}

// Q3_K: codes -4..3; 6-bit sub-block scales minus 32
void codes_q3_k(const BlockQ3_K* x, int8_t* q, int* sc) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* qs = x->qs + 32 * half;
        for (int shift = 0; shift < 4; ++shift)
            for (int l = 0; l < 32; ++l) {
                const int bit = 4 * half + shift;
                const int low = (qs[l] >> (2 * shift)) & 3;
                const int high = (x->hmask[l] >> bit) & 1;
                q[128 * half + 32 * shift + l] = static_cast<int8_t>(low - (high ? 0 : 4));
            }
    }
    int8_t scales[16];
    q3_k_scales(x->scales, scales);
    for (int j = 0; j < 16; ++j) sc[j] = scales[j];
}

void codes_q4_k(const BlockQ4_K* x, int8_t* q) {
    for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
            q[64 * g + l] = static_cast<int8_t>(x->qs[32 * g + l] & 0xF);
            q[64 * g + 32 + l] = static_cast<int8_t>(x->qs[32 * g + l] >> 4);
        }
}

void codes_q5_k(const BlockQ5_K* x, int8_t* q) {
    for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
            const int lo = x->qs[32 * g + l] & 0xF, hi = x->qs[32 * g + l] >> 4;
            q[64 * g + l] = static_cast<int8_t>(lo | (((x->qh[l] >> (2 * g)) & 1) << 4));
            q[64 * g + 32 + l] = static_cast<int8_t>(hi | (((x->qh[l] >> (2 * g + 1)) & 1) << 4));
        }
}

void codes_q6_k(const BlockQ6_K* x, int8_t* q) {
    for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = x->ql + 64 * half;
        const uint8_t* qh = x->qh + 32 * half;
        int8_t* y = q + 128 * half;
        for (int l = 0; l < 32; ++l) {
            y[l] = static_cast<int8_t>(((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32);
            y[l + 32] = static_cast<int8_t>(((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32);
            y[l + 64] = static_cast<int8_t>(((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
            y[l + 96] = static_cast<int8_t>(((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
    }
}

void codes_iq4_xs(const BlockIQ4_XS* x, int8_t* q) {
    for (int j = 0; j < 8; ++j) codes_grid(x->qs + 16 * j, kIQ4Values, q + 32 * j);
}

int dot_i8(const int8_t* a, const int8_t* b, int n) {
    int s = 0;
    for (int i = 0; i < n; ++i) s += static_cast<int>(a[i]) * static_cast<int>(b[i]);
    return s;
}

// One weight row (k values) against one activation row rounded for its type.
float dot_row(int type, const uint8_t* w, const void* act, int k) {
    int8_t q[QK_K];
    float sum = 0.0f;
    switch (type) {
        case T_F16: {
            const uint16_t* a = static_cast<const uint16_t*>(act);
            for (int i = 0; i < k; ++i) sum += f16_to_f32(load_f16(w + 2 * i)) * f16_to_f32(a[i]);
            return sum;
        }
        case T_BF16: {
            const uint16_t* a = static_cast<const uint16_t*>(act);
            for (int i = 0; i < k; ++i) {
                uint16_t h;
                std::memcpy(&h, w + 2 * i, 2);
                sum += bf16_to_f32(h) * bf16_to_f32(a[i]);
            }
            return sum;
        }
        case T_F32: {
            const float* a = static_cast<const float*>(act);
            for (int i = 0; i < k; ++i) {
                float v;
                std::memcpy(&v, w + 4 * i, 4);
                sum += v * a[i];
            }
            return sum;
        }
        case T_Q4_0: case T_Q5_0: case T_Q8_0: case T_IQ4_NL: case T_MXFP4: {
            const ActQ8_0* a = static_cast<const ActQ8_0*>(act);
            const int bytes = type_info(type)->bytes;
            for (int b = 0; b < k / QK; ++b, w += bytes) {
                float scale;
                switch (type) {
                    case T_Q4_0: codes_q4_0(w, q); scale = f16_to_f32(load_f16(w)); break;
                    case T_Q5_0: codes_q5_0(w, q); scale = f16_to_f32(load_f16(w)); break;
                    case T_Q8_0: std::memcpy(q, w + 2, QK); scale = f16_to_f32(load_f16(w)); break;
                    case T_IQ4_NL: codes_grid(w + 2, kIQ4Values, q); scale = f16_to_f32(load_f16(w)); break;
                    default: codes_grid(w + 1, kMXFP4Values, q); scale = e8m0_half(w[0]); break;
                }
                sum += static_cast<float>(dot_i8(q, a[b].qs, QK)) * (scale * a[b].d);
            }
            return sum;
        }
        case T_Q4_1: case T_Q5_1: {
            const ActQ8_1* a = static_cast<const ActQ8_1*>(act);
            const int bytes = type_info(type)->bytes;
            for (int b = 0; b < k / QK; ++b, w += bytes) {
                if (type == T_Q4_1) codes_q4_1(w, q); else codes_q5_1(w, q);
                const float d = f16_to_f32(load_f16(w)), m = f16_to_f32(load_f16(w + 2));
                sum += static_cast<float>(dot_i8(q, a[b].qs, QK)) * (d * a[b].d) + m * a[b].s;
            }
            return sum;
        }
        default: break;
    }
    // the K-quants and IQ4_XS, against q8_K
    const ActQ8_K* a = static_cast<const ActQ8_K*>(act);
    const int bytes = type_info(type)->bytes;
    for (int b = 0; b < k / QK_K; ++b, w += bytes) {
        const ActQ8_K& y = a[b];
        int scaled = 0, mins = 0;
        float d = 0.0f, dmin = 0.0f;
        switch (type) {
            case T_Q2_K: {
                auto* x = reinterpret_cast<const BlockQ2_K*>(w);
                codes_q2_k(x, q);
                for (int j = 0; j < 16; ++j) {
                    scaled += (x->scales[j] & 0xF) * dot_i8(q + 16 * j, y.qs + 16 * j, 16);
                    mins += (x->scales[j] >> 4) * y.bsums[j];
                }
                d = f16_to_f32(x->d);
                dmin = f16_to_f32(x->dmin);
                break;
            }
            case T_Q3_K: {
                auto* x = reinterpret_cast<const BlockQ3_K*>(w);
                int sc[16];
                codes_q3_k(x, q, sc);
                for (int j = 0; j < 16; ++j) scaled += sc[j] * dot_i8(q + 16 * j, y.qs + 16 * j, 16);
                d = f16_to_f32(x->d);
                break;
            }
            case T_Q4_K: case T_Q5_K: {
                const uint8_t* packed;
                if (type == T_Q4_K) {
                    auto* x = reinterpret_cast<const BlockQ4_K*>(w);
                    codes_q4_k(x, q);
                    packed = x->scales;
                    d = f16_to_f32(x->d);
                    dmin = f16_to_f32(x->dmin);
                } else {
                    auto* x = reinterpret_cast<const BlockQ5_K*>(w);
                    codes_q5_k(x, q);
                    packed = x->scales;
                    d = f16_to_f32(x->d);
                    dmin = f16_to_f32(x->dmin);
                }
                for (int j = 0; j < 8; ++j) {
                    uint8_t sc, m;
                    k_scale_min(j, packed, &sc, &m);
                    scaled += sc * dot_i8(q + 32 * j, y.qs + 32 * j, 32);
                    mins += m * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
                }
                break;
            }
            case T_Q6_K: {
                auto* x = reinterpret_cast<const BlockQ6_K*>(w);
                codes_q6_k(x, q);
                for (int j = 0; j < 16; ++j) scaled += x->scales[j] * dot_i8(q + 16 * j, y.qs + 16 * j, 16);
                d = f16_to_f32(x->d);
                break;
            }
            default: {  // IQ4_XS
                auto* x = reinterpret_cast<const BlockIQ4_XS*>(w);
                codes_iq4_xs(x, q);
                for (int j = 0; j < 8; ++j) scaled += iq4_xs_scale(x, j) * dot_i8(q + 32 * j, y.qs + 32 * j, 32);
                d = f16_to_f32(x->d);
                break;
            }
        }
        sum += (d * y.d) * static_cast<float>(scaled) - (dmin * y.d) * static_cast<float>(mins);
    }
    return sum;
}

}  // namespace

// ------------------------------------------------------------------ dequantization (gguf's numbers)
void dequantize_row(int type, const uint8_t* w, float* out, int k) {
    int8_t q[QK_K];
    switch (type) {
        case T_F32: std::memcpy(out, w, sizeof(float) * k); return;
        case T_F16: for (int i = 0; i < k; ++i) out[i] = f16_to_f32(load_f16(w + 2 * i)); return;
        case T_BF16:
            for (int i = 0; i < k; ++i) {
                uint16_t h;
                std::memcpy(&h, w + 2 * i, 2);
                out[i] = bf16_to_f32(h);
            }
            return;
        default: break;
    }
    const TypeInfo* info = type_info(type);
    for (int b = 0; b < k / info->values; ++b, w += info->bytes, out += info->values) {
        switch (type) {
            case T_Q4_0: case T_Q5_0: case T_Q8_0: case T_IQ4_NL: {
                if (type == T_Q4_0) codes_q4_0(w, q);
                else if (type == T_Q5_0) codes_q5_0(w, q);
                else if (type == T_Q8_0) std::memcpy(q, w + 2, QK);
                else codes_grid(w + 2, kIQ4Values, q);
                const float d = f16_to_f32(load_f16(w));
                for (int j = 0; j < QK; ++j) out[j] = d * static_cast<float>(q[j]);
                break;
            }
            case T_MXFP4: {
                codes_grid(w + 1, kMXFP4Values, q);
                const float d = e8m0_half(w[0]);
                for (int j = 0; j < QK; ++j) out[j] = d * static_cast<float>(q[j]);
                break;
            }
            case T_Q4_1: case T_Q5_1: {
                if (type == T_Q4_1) codes_q4_1(w, q); else codes_q5_1(w, q);
                const float d = f16_to_f32(load_f16(w)), m = f16_to_f32(load_f16(w + 2));
                for (int j = 0; j < QK; ++j) out[j] = d * static_cast<float>(q[j]) + m;
                break;
            }
            case T_Q2_K: {
                auto* x = reinterpret_cast<const BlockQ2_K*>(w);
                codes_q2_k(x, q);
                const float d = f16_to_f32(x->d), dmin = f16_to_f32(x->dmin);
                for (int j = 0; j < 16; ++j) {
                    const float dl = d * static_cast<float>(x->scales[j] & 0xF);
                    const float ml = dmin * static_cast<float>(x->scales[j] >> 4);
                    for (int l = 0; l < 16; ++l) out[16 * j + l] = dl * static_cast<float>(q[16 * j + l]) - ml;
                }
                break;
            }
            case T_Q3_K: {
                auto* x = reinterpret_cast<const BlockQ3_K*>(w);
                int sc[16];
                codes_q3_k(x, q, sc);
                const float d = f16_to_f32(x->d);
                for (int j = 0; j < 16; ++j) {
                    const float dl = d * static_cast<float>(sc[j]);
                    for (int l = 0; l < 16; ++l) out[16 * j + l] = dl * static_cast<float>(q[16 * j + l]);
                }
                break;
            }
            case T_Q4_K: case T_Q5_K: {
                const uint8_t* packed;
                float d, dmin;
                if (type == T_Q4_K) {
                    auto* x = reinterpret_cast<const BlockQ4_K*>(w);
                    codes_q4_k(x, q);
                    packed = x->scales, d = f16_to_f32(x->d), dmin = f16_to_f32(x->dmin);
                } else {
                    auto* x = reinterpret_cast<const BlockQ5_K*>(w);
                    codes_q5_k(x, q);
                    packed = x->scales, d = f16_to_f32(x->d), dmin = f16_to_f32(x->dmin);
                }
                for (int j = 0; j < 8; ++j) {
                    uint8_t sc, m;
                    k_scale_min(j, packed, &sc, &m);
                    const float dl = d * static_cast<float>(sc), ml = dmin * static_cast<float>(m);
                    for (int l = 0; l < 32; ++l) out[32 * j + l] = dl * static_cast<float>(q[32 * j + l]) - ml;
                }
                break;
            }
            case T_Q6_K: {
                auto* x = reinterpret_cast<const BlockQ6_K*>(w);
                codes_q6_k(x, q);
                const float d = f16_to_f32(x->d);
                for (int j = 0; j < 16; ++j) {
                    const float dl = d * static_cast<float>(x->scales[j]);
                    for (int l = 0; l < 16; ++l) out[16 * j + l] = dl * static_cast<float>(q[16 * j + l]);
                }
                break;
            }
            default: {  // IQ4_XS
                auto* x = reinterpret_cast<const BlockIQ4_XS*>(w);
                codes_iq4_xs(x, q);
                const float d = f16_to_f32(x->d);
                for (int j = 0; j < 8; ++j) {
                    const float dl = d * static_cast<float>(iq4_xs_scale(x, j));
                    for (int l = 0; l < 32; ++l) out[32 * j + l] = dl * static_cast<float>(q[32 * j + l]);
                }
                break;
            }
        }
    }
}

namespace scalar {

void dot_tile(int type, const uint8_t* w, size_t w_stride, int rows, const uint8_t* act, size_t act_stride, int cols,
              int k, float* out, size_t out_stride) {
    for (int c = 0; c < cols; ++c)
        for (int r = 0; r < rows; ++r) out[c * out_stride + r] = dot_row(type, w + r * w_stride, act + c * act_stride, k);
}

void dot_rows_float(int type, const uint8_t* w, size_t w_stride, int rows, const float* x, int k, float* out,
                    size_t out_stride) {
    float row[QK_K];
    const TypeInfo* info = type_info(type);
    const int chunk = info->values == 1 ? QK_K : info->values;
    const size_t chunk_bytes = static_cast<size_t>(chunk / info->values) * info->bytes;
    for (int r = 0; r < rows; ++r) {
        const uint8_t* wr = w + r * w_stride;
        float sum = 0.0f;
        for (int c = 0; c < k; c += chunk) {
            const int n = k - c < chunk ? k - c : chunk;
            dequantize_row(type, wr + (c / chunk) * chunk_bytes, row, n);
            float part = 0.0f;
            for (int j = 0; j < n; ++j) part += row[j] * x[c + j];
            sum += part;
        }
        out[r * out_stride] = sum;
    }
}

// llama.cpp's x86 rounding of q8_0 / q8_1: scale amax / 127 stored as float16, codes
// round-to-nearest-even of x * (127 / amax).
// one block's codes (round-to-nearest-even of x * 127 / amax), their sum returned; *d the scale amax / 127
int round_q8(const float* x, int8_t* qs, float* d) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    *d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
        qs[j] = static_cast<int8_t>(std::nearbyint(x[j] * id));
        sum += qs[j];
    }
    return sum;
}

void quantize_q8_0(const float* x, ActQ8_0* out, int k) {
    for (int b = 0; b < k / QK; ++b, x += QK) {
        float d;
        out[b].sum = round_q8(x, out[b].qs, &d);
        out[b].d = f16_round(d);
    }
}

void quantize_q8_1(const float* x, ActQ8_1* out, int k) {
    for (int b = 0; b < k / QK; ++b, x += QK) {
        float d;
        const int sum = round_q8(x, out[b].qs, &d);
        out[b].d = f16_round(d);
        out[b].s = f16_round(d * static_cast<float>(sum));  // llama.cpp: the unrounded scale times the sum
    }
}

// q8_K: the value of largest magnitude maps to -127 (its sign kept in the scale), codes
// round-to-nearest-even clamped at 127, sums of each 16 codes kept for the minimums.
void quantize_q8_K(const float* x, ActQ8_K* out, int k) {
    for (int b = 0; b < k / QK_K; ++b, x += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) {
                amax = ax;
                max = x[j];
            }
        }
        ActQ8_K& y = out[b];
        if (amax == 0.0f) {
            std::memset(&y, 0, sizeof(y));
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < QK_K; ++j) {
            const int v = static_cast<int>(std::nearbyint(iscale * x[j]));
            y.qs[j] = static_cast<int8_t>(v < 127 ? v : 127);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int l = 0; l < 16; ++l) sum += y.qs[16 * j + l];
            y.bsums[j] = static_cast<int16_t>(sum);
        }
        y.d = 1.0f / iscale;
    }
}

void quantize_f16(const float* x, uint16_t* out, int k) {
    for (int i = 0; i < k; ++i) out[i] = f32_to_f16(x[i]);
}

void quantize_bf16(const float* x, uint16_t* out, int k) {
    for (int i = 0; i < k; ++i) out[i] = f32_to_bf16(x[i]);
}

}  // namespace scalar
}  // namespace i4p
