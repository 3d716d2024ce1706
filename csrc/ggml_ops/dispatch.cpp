// Which kernel table runs: the best the CPU has, unless one is forced (tests force each path).
#include <algorithm>
#include <atomic>

#include "kernels.h"

namespace i4p {

namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
    switch (isa) {
        case Isa::Scalar: return true;
        case Isa::Avx2:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        case Isa::Avx512Vnni:
            return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c") &&
                   __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
    return false;
#else
    return isa == Isa::Scalar;
#endif
}

const KernelTable* compiled(Isa isa) {
    switch (isa) {
        case Isa::Avx2: return avx2_table();
        case Isa::Avx512Vnni: return avx512vnni_table();
        default: return nullptr;
    }
}

const KernelTable kScalar = [] {
    KernelTable t{};
    t.isa = Isa::Scalar;
    return t;
}();

std::atomic<const KernelTable*> g_active{nullptr};

}  // namespace

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512Vnni: return "avx512vnni";
    }
    return "unknown";
}

Isa best_isa() {
    for (Isa isa : {Isa::Avx512Vnni, Isa::Avx2})
        if (cpu_has(isa) && compiled(isa) != nullptr) return isa;
    return Isa::Scalar;
}

bool set_isa(Isa isa) {
    if (isa == Isa::Scalar) {
        g_active.store(&kScalar);
        return true;
    }
    if (!cpu_has(isa) || compiled(isa) == nullptr) return false;
    g_active.store(compiled(isa));
    return true;
}

const KernelTable& active_table() {
    const KernelTable* t = g_active.load();
    if (t == nullptr) {
        const Isa isa = best_isa();
        t = isa == Isa::Scalar ? &kScalar : compiled(isa);
        g_active.store(t);
    }
    return *t;
}

size_t act_row_bytes(int type, int k) {
    switch (type_info(type)->act) {
        case Act::F32: return sizeof(float) * k;
        case Act::F16: case Act::BF16: return 2 * static_cast<size_t>(k);
        case Act::Q8_0: return sizeof(ActQ8_0) * (k / QK);
        case Act::Q8_1: return sizeof(ActQ8_1) * (k / QK);
        case Act::Q8_K: return sizeof(ActQ8_K) * (k / QK_K);
    }
    return 0;
}

void quantize_act_row(int type, const float* x, void* out, int k) {
    const KernelTable& t = active_table();
    switch (type_info(type)->act) {
        case Act::F32: std::copy(x, x + k, static_cast<float*>(out)); return;
        case Act::F16: scalar::quantize_f16(x, static_cast<uint16_t*>(out), k); return;
        case Act::BF16: scalar::quantize_bf16(x, static_cast<uint16_t*>(out), k); return;
        case Act::Q8_0:
            (t.quantize_q8_0 ? t.quantize_q8_0 : scalar::quantize_q8_0)(x, static_cast<ActQ8_0*>(out), k);
            return;
        case Act::Q8_1:
            (t.quantize_q8_1 ? t.quantize_q8_1 : scalar::quantize_q8_1)(x, static_cast<ActQ8_1*>(out), k);
            return;
        case Act::Q8_K:
            (t.quantize_q8_K ? t.quantize_q8_K : scalar::quantize_q8_K)(x, static_cast<ActQ8_K*>(out), k);
            return;
    }
}

}  // namespace i4p
