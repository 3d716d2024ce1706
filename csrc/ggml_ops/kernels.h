// The kernels behind the operators, one table per instruction set. The scalar table is the
// reference: every other table computes the same integer block sums and combines them in float32
// (its summation order may differ, nothing else), and falls back to the scalar entry for a type
// it has no kernel for.
#pragma once

#include <cstddef>
#include <cstdint>

#include "blocks.h"

namespace i4p {

enum class Isa : int { Scalar = 0, Avx2 = 1, Avx512Vnni = 2 };

const char* isa_name(Isa isa);

// Dot products of weight rows with activation rows already rounded to the weight type's activation
// block: ``out[c * out_stride + r] = dot(w + r * w_stride, act + c * act_stride)`` for ``r < rows``,
// ``c < cols``. A kernel reads each weight block once for several activation rows (a prompt), and
// once for one (a decode step).
using DotTileFn = void (*)(int type, const uint8_t* w, size_t w_stride, int rows, const uint8_t* act,
                           size_t act_stride, int cols, int k, float* out, size_t out_stride);

// The same for weights repacked eight rows at a time (``repack_rows``): ``groups`` groups of eight
// rows, ``out[c * out_stride + 8 * g + i]`` for row i of group g.
using DotPackedFn = void (*)(int type, const uint8_t* packed, int groups, const uint8_t* act, size_t act_stride,
                             int cols, int k, float* out, size_t out_stride);

struct KernelTable {
    Isa isa;
    // per type id (< 64): null where this ISA has no kernel (the scalar one is used)
    DotTileFn dot_tile[64];
    // per type id: a kernel over eight interleaved rows, null where this ISA multiplies the file's rows
    DotPackedFn dot_packed[64];
    // float32 activations rounded to an activation block: null where the scalar one is used
    void (*quantize_q8_0)(const float* x, ActQ8_0* out, int k);
    void (*quantize_q8_1)(const float* x, ActQ8_1* out, int k);
    void (*quantize_q8_K)(const float* x, ActQ8_K* out, int k);
};

// The scalar reference: dot products of every type, in both activation modes.
namespace scalar {
void dot_tile(int type, const uint8_t* w, size_t w_stride, int rows, const uint8_t* act, size_t act_stride, int cols,
              int k, float* out, size_t out_stride);
void dot_rows_float(int type, const uint8_t* w, size_t w_stride, int rows, const float* x, int k, float* out,
                    size_t out_stride);
void quantize_q8_0(const float* x, ActQ8_0* out, int k);
void quantize_q8_1(const float* x, ActQ8_1* out, int k);
void quantize_q8_K(const float* x, ActQ8_K* out, int k);
void quantize_f16(const float* x, uint16_t* out, int k);
void quantize_bf16(const float* x, uint16_t* out, int k);
}  // namespace scalar

// ``k`` values of one weight row as float32, exactly as gguf's dequantize computes them.
void dequantize_row(int type, const uint8_t* w, float* out, int k);

const KernelTable* avx2_table();        // null when not compiled in
const KernelTable* avx512vnni_table();  // null when not compiled in

// The chosen table: the best the CPU has, or the one forced (set_isa).
const KernelTable& active_table();
Isa best_isa();
// Forces a path; false (and nothing changed) when the CPU or the build lacks it.
bool set_isa(Isa isa);

// Repacked weights (repack.cpp). Bytes of one group of eight rows of ``k`` values, 0 for a type that is
// not repacked.
size_t packed_group_bytes(int type, int k);
// Groups [first, first + count) of a weight of rows of ``w_stride`` bytes, into ``out``.
void repack_rows(int type, const uint8_t* w, size_t w_stride, int first, int count, int k, uint8_t* out);
// Row ``row`` of a weight repacked by repack_rows (``packed``: its first group) back into the file's
// layout: the ``k`` values' blocks, byte for byte as stored, into ``out``.
void unpack_row(int type, const uint8_t* packed, int64_t row, int k, uint8_t* out);
// Memory for a repacked weight (in 2 MB pages with INFERENCE4PY_GGML_HUGEPAGES=1 where the system gives
// them: streams the prefetchers follow further), or null; free_packed(p, bytes) gives it back to the system.
uint8_t* allocate_packed(size_t bytes);
void free_packed(uint8_t* p, size_t bytes);
// Maps the pages of [p, p + bytes) in one call before they are all read (a file's, through the page
// cache), instead of one fault per page.
void prefault(const void* p, size_t bytes);
// Gives back the pages of [p, p + bytes) when they are a mapped file's (read again from the file if
// touched later); anonymous memory, the only copy of its bytes, is left alone.
void release_file_pages(const void* p, size_t bytes);

// Bytes of the activation blocks of a row of ``k`` values for ``type``.
size_t act_row_bytes(int type, int k);
// Rounds one activation row for ``type`` (llama.cpp's rounding), with the active table.
void quantize_act_row(int type, const float* x, void* out, int k);

}  // namespace i4p
