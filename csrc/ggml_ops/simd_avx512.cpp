// The AVX-512 VNNI instantiation of simd.inc (256-bit vectors with vpdpbusd: AVX512VL + VNNI).
#define I4P_NS avx512vnni
#define I4P_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")))
#define I4P_VNNI 1
#include "simd.inc"

namespace i4p {
const KernelTable* avx512vnni_table() { return avx512vnni::table(); }
}  // namespace i4p
