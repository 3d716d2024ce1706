// What the operators share (ops.cpp: GgmlMatMul and GgmlGather; experts.cpp: GgmlExpertMatMul): the
// runtime's API table, statuses, attributes and shapes, onnxruntime's thread pool, activation
// rounding, weights repacked on first use, and the OrtCustomOp table each operator fills.
#pragma once

#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kernels.h"
#include "ort_abi.h"

namespace i4p {

extern const ort::Api* g_api;  // the runtime's table, set once by RegisterCustomOps

// An InvalidArgument status: "inference4py ggml operator: <message>".
OrtStatus* fail(const std::string& message);
// An int attribute, or `fallback` when the node does not have it.
int64_t attribute(const OrtKernelInfo* info, const char* name, int64_t fallback);

struct Shape {
    std::vector<int64_t> dims;
    int element_type = 0;
    int64_t count() const {
        int64_t n = 1;
        for (int64_t d : dims) n *= d;
        return n;
    }
};

OrtStatus* shape_of(const OrtValue* value, Shape* out);
std::string dims_text(const std::vector<int64_t>& dims);
// Bytes of a row of `k` values of `type`.
size_t row_bytes(int type, int64_t k);

// fn(data, i) for i < total on onnxruntime's intra-op threads (inline when total is 1).
OrtStatus* parallel(OrtKernelContext* context, void (*fn)(void*, size_t), size_t total, void* data);

// Rows of float32 activations rounded to `type`'s activation blocks, in parallel: `rows` rows of `k`
// values from `x` into `out` (resized), each `*stride` bytes.
OrtStatus* round_activations(OrtKernelContext* context, int type, const float* x, int64_t rows, int64_t k,
                             std::vector<uint8_t>* out, size_t* stride);

// The input rows rounded for each of `weights` weights' types, once per distinct activation kind (weights
// of the same kind share one buffer): act[i] and stride[i] for weight i, the bytes held in buffers[].
OrtStatus* round_for_weights(OrtKernelContext* context, const int* types, int weights, const float* x, int64_t rows,
                             int64_t k, std::vector<uint8_t>* buffers, const uint8_t** act, size_t* stride);

// A gated activation of two weights' outputs (an MLP's gate and up): act(x @ W0.T) * (x @ W1.T)
enum class Gate : int { None = 0, Silu = 1, GeluTanh = 2 };

inline float gate_value(Gate gate, float x) {
    if (gate == Gate::Silu) return x / (1.0f + std::exp(-x));
    const float inner = 0.7978845608028654f * (x + 0.044715f * x * x * x);  // sqrt(2 / pi)
    return 0.5f * x * (1.0f + std::tanh(inner));
}

// The `gate` attribute, checked: false (and `*status` set) when it is not 0, 1 or 2.
bool gate_attribute(const OrtKernelInfo* info, const char* op, Gate* gate, OrtStatus** status);

// Whether weights are repacked (INFERENCE4PY_GGML_REPACK=0 says no), read when a kernel is made.
bool repack_enabled();

// A weight repacked eight rows at a time (repack.cpp): its memory, given back to the system when the last
// holder lets go (the operator that made it, or a GgmlGather reading rows from it at that moment).
struct PackedCopy {
    uint8_t* data;
    size_t bytes;
    int type;
    int64_t k, rows;
    PackedCopy(uint8_t* data, size_t bytes, int type, int64_t k, int64_t rows)
        : data(data), bytes(bytes), type(type), k(k), rows(rows) {}
    PackedCopy(const PackedCopy&) = delete;
    PackedCopy& operator=(const PackedCopy&) = delete;
    ~PackedCopy() { free_packed(data, bytes); }
};

// An operator's weight repacked, made the first time the operator runs with a kernel that reads that
// layout. Only a constant initializer is: a weight fed as a graph input may change between runs, even in
// place at the same address, so it is always read as it comes.
struct PackedWeight {
    bool constant = false;                        // set when the kernel is made (constant_input)
    std::atomic<const uint8_t*> source{nullptr};  // set once the packed copy is complete
    std::shared_ptr<const PackedCopy> copy;
    std::mutex making;
};

// Whether the node's input `index` is a constant initializer (false where onnxruntime cannot say).
bool constant_input(const OrtKernelInfo* info, size_t index);

// `w` (`rows` rows of `stride` bytes of `type`, `k` values each) repacked for `table`'s kernels, made
// on first use; null where the rows are read as stored (no such kernel, rows not a multiple of eight,
// no memory for the copy). The file's pages of a repacked weight are given back.
const uint8_t* packed_weight(PackedWeight& p, int type, int64_t k, const KernelTable& table, const uint8_t* w,
                             int64_t rows, size_t stride, OrtKernelContext* context, OrtStatus** status);

// The copy an operator made of the constant at `source` (packed_weight), while that operator keeps it,
// or null. Another operator reading the same constant (a tied embedding table's GgmlGather) reads its
// rows there: the file's pages of a repacked weight have been given back, and reading them again would
// hold the table twice. The caller keeps the copy alive as long as it holds the pointer.
std::shared_ptr<const PackedCopy> find_packed(const uint8_t* source);

// Rows [first, first + rows) of a weight of `type` (its rows as stored, `w`, `w_stride` bytes apart, or their
// eight-row repacking `packed`, null when there is none) against `cols` activation rows rounded for `type`:
// out[c * out_stride + r], with the table's kernel (the scalar one where the table has none).
void dot_weight_rows(const KernelTable& table, int type, int k, const uint8_t* w, size_t w_stride,
                     const uint8_t* packed, int64_t first, int rows, const uint8_t* act, size_t act_stride, int cols,
                     float* out, size_t out_stride);

// ------------------------------------------------------------------ the OrtCustomOp table of an operator
struct Op {
    ort::CustomOp base;
    const char* name;
    std::vector<int> input_types;
    std::vector<bool> optional;
    OrtStatus* (*create)(const OrtKernelInfo*, void**);
    OrtStatus* (*compute)(void*, OrtKernelContext*);
    void (*destroy)(void*);
};

// An operator of one float32 output taking `types` (onnx element types; `optional` per input).
Op make_op(const char* name, std::vector<int> types, std::vector<bool> optional,
           OrtStatus* (*create)(const OrtKernelInfo*, void**), OrtStatus* (*compute)(void*, OrtKernelContext*),
           void (*destroy)(void*));

Op* experts_op();  // experts.cpp

}  // namespace i4p
