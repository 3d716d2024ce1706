// The AVX2 (+FMA, F16C) instantiation of simd.inc.
#define I4P_NS avx2
#define I4P_TARGET __attribute__((target("avx2,fma,f16c")))
#define I4P_VNNI 0
#include "simd.inc"

namespace i4p {
const KernelTable* avx2_table() { return avx2::table(); }
}  // namespace i4p
