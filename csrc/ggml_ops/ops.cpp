// The operators as onnxruntime sees them: GgmlMatMul and GgmlGather (here) and GgmlExpertMatMul
// (experts.cpp) in the ai.inference4py domain, registered by RegisterCustomOps (what SessionOptions.register_custom_ops_library calls).
// Bad shapes and types are statuses with a message naming the problem, never a crash.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "op_support.h"

#define I4P_EXPORT extern "C" __attribute__((visibility("default")))

namespace i4p {
namespace {

// ------------------------------------------------------------------ GgmlMatMul
constexpr int kMaxWeights = 3;
constexpr int kRowsPerTask = 16;  // a task's weight rows, at least (a multiple of it)
constexpr int64_t kTasksPerWeight = 32;  // enough to balance a few threads; fewer, larger tasks cost less to hand out
constexpr int kActRowsPerTile = 8;  // activation rows a kernel takes at once (simd.inc: tiles of 8 on VNNI, 4 on AVX2)

struct MatMulKernel {
    int types[kMaxWeights];
    int weights;  // how many of types[] the node names
    int64_t k;
    bool float_activations;
    Gate gate;
    bool repack;  // INFERENCE4PY_GGML_REPACK=0 turns the repacked layouts off
    PackedWeight packed[kMaxWeights];
};

struct MatMulRun {
    const MatMulKernel* kernel;
    const float* x;
    int64_t m;
    int64_t n_total;
    float* y;
    // per weight: its rows, columns of Y it fills, its bytes, its activation rows
    const uint8_t* w[kMaxWeights];
    int64_t n[kMaxWeights];
    int64_t col[kMaxWeights];
    size_t w_stride[kMaxWeights];
    const uint8_t* act[kMaxWeights];
    size_t act_stride[kMaxWeights];
    const uint8_t* packed[kMaxWeights];  // the weight repacked eight rows at a time, or null
    int64_t rows_per_task[kMaxWeights];
    // tasks: (weight, first row)
    std::vector<std::pair<int, int64_t>> tasks;
    const KernelTable* table;
};

// rows [first, first + rows) of weight `which` against activation rows [i, i + cols)
void dot_rows(const MatMulRun& run, int which, int64_t first, int rows, int64_t i, int cols, float* out,
              size_t out_stride) {
    dot_weight_rows(*run.table, run.kernel->types[which], static_cast<int>(run.kernel->k), run.w[which],
                    run.w_stride[which], run.packed[which], first, rows, run.act[which] + i * run.act_stride[which],
                    run.act_stride[which], cols, out, out_stride);
}

void gated_task(const MatMulRun& run, int64_t first) {
    // the same rows of both weights, a tile of activation rows at a time, then act(gate) * up
    const MatMulKernel& kernel = *run.kernel;
    const int rows = static_cast<int>(std::min<int64_t>(run.rows_per_task[0], run.n[0] - first));
    const int k = static_cast<int>(kernel.k);
    std::vector<float> gate(static_cast<size_t>(rows) * kActRowsPerTile), up(gate.size());
    for (int64_t i = 0; i < run.m; i += kActRowsPerTile) {
        const int cols = static_cast<int>(std::min<int64_t>(kActRowsPerTile, run.m - i));
        float* parts[2] = {gate.data(), up.data()};
        for (int which = 0; which < 2; ++which) {
            const uint8_t* w = run.w[which] + first * run.w_stride[which];
            const int type = kernel.types[which];
            if (kernel.float_activations) {
                for (int c = 0; c < cols; ++c)
                    scalar::dot_rows_float(type, w, run.w_stride[which], rows, run.x + (i + c) * k, k, parts[which] + c * rows, 1);
            } else {
                dot_rows(run, which, first, rows, i, cols, parts[which], static_cast<size_t>(rows));
            }
        }
        for (int c = 0; c < cols; ++c) {
            float* out = run.y + (i + c) * run.n_total + first;
            for (int r = 0; r < rows; ++r) out[r] = gate_value(kernel.gate, gate[c * rows + r]) * up[c * rows + r];
        }
    }
}

void matmul_task(void* data, size_t index) {
    const MatMulRun& run = *static_cast<const MatMulRun*>(data);
    if (run.kernel->gate != Gate::None) {
        gated_task(run, run.tasks[index].second);
        return;
    }
    const auto [which, first] = run.tasks[index];
    const int type = run.kernel->types[which];
    const int rows = static_cast<int>(std::min<int64_t>(run.rows_per_task[which], run.n[which] - first));
    const uint8_t* w = run.w[which] + first * run.w_stride[which];
    const int k = static_cast<int>(run.kernel->k);
    float* out = run.y + run.col[which] + first;
    if (run.kernel->float_activations) {
        for (int64_t i = 0; i < run.m; ++i)
            scalar::dot_rows_float(type, w, run.w_stride[which], rows, run.x + i * k, k, out + i * run.n_total, 1);
        return;
    }
    // the task's weight rows stay in cache while every activation row passes, a few at a time
    for (int64_t i = 0; i < run.m; i += kActRowsPerTile) {
        const int cols = static_cast<int>(std::min<int64_t>(kActRowsPerTile, run.m - i));
        dot_rows(run, which, first, rows, i, cols, out + i * run.n_total, static_cast<size_t>(run.n_total));
    }
}

OrtStatus* matmul_compute(void* kernel_ptr, OrtKernelContext* context) {
    MatMulKernel& kernel = *static_cast<MatMulKernel*>(kernel_ptr);
    const OrtValue* x_value = nullptr;
    if (OrtStatus* s = g_api->KernelContext_GetInput(context, 0, &x_value)) return s;
    Shape xs;
    if (OrtStatus* s = shape_of(x_value, &xs)) return s;
    if (xs.dims.empty() || xs.dims.back() != kernel.k)
        return fail("GgmlMatMul input X has shape " + dims_text(xs.dims) + ", its last axis must be K=" +
                    std::to_string(kernel.k));
    MatMulRun run{};
    run.kernel = &kernel;
    run.table = &active_table();
    run.m = xs.count() / kernel.k;
    const void* x_data = nullptr;
    if (OrtStatus* s = g_api->GetTensorData(x_value, &x_data)) return s;
    run.x = static_cast<const float*>(x_data);
    for (int i = 0; i < kernel.weights; ++i) {
        const OrtValue* wv = nullptr;
        if (OrtStatus* s = g_api->KernelContext_GetInput(context, 1 + i, &wv)) return s;
        if (wv == nullptr) return fail("GgmlMatMul weight input " + std::to_string(1 + i) + " is missing");
        Shape ws;
        if (OrtStatus* s = shape_of(wv, &ws)) return s;
        const size_t bytes = row_bytes(kernel.types[i], kernel.k);
        if (ws.dims.size() != 2 || ws.dims[1] != static_cast<int64_t>(bytes))
            return fail(std::string("GgmlMatMul weight ") + std::to_string(i) + " of type " +
                        type_info(kernel.types[i])->name + " has shape " + dims_text(ws.dims) +
                        ", expected [rows, " + std::to_string(bytes) + "] for K=" + std::to_string(kernel.k));
        const void* wd = nullptr;
        if (OrtStatus* s = g_api->GetTensorData(wv, &wd)) return s;
        run.w[i] = static_cast<const uint8_t*>(wd);
        run.w_stride[i] = bytes;
        OrtStatus* packing = nullptr;
        if (kernel.repack && !kernel.float_activations)
            run.packed[i] = packed_weight(kernel.packed[i], kernel.types[i], kernel.k, *run.table, run.w[i], ws.dims[0],
                                          bytes, context, &packing);
        if (packing != nullptr) return packing;
        run.n[i] = ws.dims[0];
        run.col[i] = run.n_total;
        run.n_total += ws.dims[0];
        // one activation row (a decode step): tasks of many rows; a prompt: small tasks, rows kept in cache
        int64_t per_task = kRowsPerTask;
        if (run.m < kActRowsPerTile) {
            const int64_t spread = (run.n[i] + kTasksPerWeight - 1) / kTasksPerWeight;
            per_task = std::max<int64_t>(kRowsPerTask, (spread + kRowsPerTask - 1) / kRowsPerTask * kRowsPerTask);
        }
        run.rows_per_task[i] = per_task;
        if (kernel.gate != Gate::None && i > 0) continue;  // gated: tasks over the gate's rows take both
        for (int64_t first = 0; first < run.n[i]; first += per_task) run.tasks.emplace_back(i, first);
    }
    if (kernel.gate != Gate::None) {
        if (kernel.weights != 2 || run.n[0] != run.n[1])
            return fail("GgmlMatMul with a gated activation takes two weights of equal rows (gate, up)");
        run.n_total = run.n[0];
    }
    std::vector<int64_t> out_dims = xs.dims;
    out_dims.back() = run.n_total;
    OrtValue* y_value = nullptr;
    if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, out_dims.data(), out_dims.size(), &y_value)) return s;
    void* y_data = nullptr;
    if (OrtStatus* s = g_api->GetTensorMutableData(y_value, &y_data)) return s;
    run.y = static_cast<float*>(y_data);
    if (run.m == 0 || run.n_total == 0) return nullptr;

    // each weight's activation rows, rounded once per distinct activation kind
    std::vector<uint8_t> buffers[kMaxWeights];
    if (!kernel.float_activations)
        if (OrtStatus* s = round_for_weights(context, kernel.types, kernel.weights, run.x, run.m, kernel.k, buffers,
                                             run.act, run.act_stride))
            return s;
    return parallel(context, matmul_task, run.tasks.size(), &run);
}

OrtStatus* matmul_create(const OrtKernelInfo* info, void** kernel_out) {
    auto* kernel = new MatMulKernel{};
    kernel->k = attribute(info, "K", -1);
    kernel->float_activations = attribute(info, "float_activations", 0) != 0;
    OrtStatus* bad = nullptr;
    if (!gate_attribute(info, "GgmlMatMul", &kernel->gate, &bad)) {
        delete kernel;
        return bad;
    }
    kernel->repack = repack_enabled();
    const char* names[kMaxWeights] = {"type", "type1", "type2"};
    size_t inputs = 0;
    if (OrtStatus* s = g_api->KernelInfo_GetInputCount(info, &inputs)) {
        delete kernel;
        return s;
    }
    kernel->weights = static_cast<int>(std::min<size_t>(inputs - 1, kMaxWeights));
    for (int i = 0; i < kernel->weights; ++i) {
        kernel->packed[i].constant = constant_input(info, 1 + i);
        kernel->types[i] = static_cast<int>(attribute(info, names[i], -1));
        const TypeInfo* t = type_info(kernel->types[i]);
        if (t == nullptr) {
            const int type = kernel->types[i];
            delete kernel;
            return fail("GgmlMatMul attribute " + std::string(names[i]) + "=" + std::to_string(type) +
                        " is not a ggml type this library holds; upgrade inference4py or convert the file with --bits 32");
        }
        if (kernel->k <= 0 || kernel->k % t->values != 0) {
            const int64_t k = kernel->k;
            delete kernel;
            return fail("GgmlMatMul attribute K=" + std::to_string(k) + " is not a positive multiple of " + t->name +
                        "'s block of " + std::to_string(t->values));
        }
    }
    *kernel_out = kernel;
    return nullptr;
}

// ------------------------------------------------------------------ GgmlGather
struct GatherKernel {
    int type;
    int64_t k;
    bool reads_copy;  // a constant table, repacking on: its rows may come from a GgmlMatMul's copy (tied)
};

struct GatherRun {
    const GatherKernel* kernel;
    const uint8_t* w;
    size_t stride;
    const uint8_t* packed;  // the table repacked by an operator that multiplies by it, or null
    const int64_t* ids;
    float* y;
};

void gather_task(void* data, size_t index) {
    const GatherRun& run = *static_cast<const GatherRun*>(data);
    const GatherKernel& kernel = *run.kernel;
    float* out = run.y + index * kernel.k;
    if (run.packed == nullptr) {
        dequantize_row(kernel.type, run.w + run.ids[index] * run.stride, out, static_cast<int>(kernel.k));
        return;
    }
    // the row's blocks as the file stores them, so the values are the file row's to the bit
    std::vector<uint8_t> row(run.stride);
    unpack_row(kernel.type, run.packed, run.ids[index], static_cast<int>(kernel.k), row.data());
    dequantize_row(kernel.type, row.data(), out, static_cast<int>(kernel.k));
}

OrtStatus* gather_compute(void* kernel_ptr, OrtKernelContext* context) {
    const GatherKernel& kernel = *static_cast<const GatherKernel*>(kernel_ptr);
    const OrtValue* wv = nullptr;
    const OrtValue* iv = nullptr;
    if (OrtStatus* s = g_api->KernelContext_GetInput(context, 0, &wv)) return s;
    if (OrtStatus* s = g_api->KernelContext_GetInput(context, 1, &iv)) return s;
    Shape ws, is;
    if (OrtStatus* s = shape_of(wv, &ws)) return s;
    if (OrtStatus* s = shape_of(iv, &is)) return s;
    const size_t bytes = row_bytes(kernel.type, kernel.k);
    if (ws.dims.size() != 2 || ws.dims[1] != static_cast<int64_t>(bytes))
        return fail(std::string("GgmlGather table of type ") + type_info(kernel.type)->name + " has shape " +
                    dims_text(ws.dims) + ", expected [rows, " + std::to_string(bytes) + "]");
    GatherRun run{&kernel, nullptr, bytes, nullptr, nullptr, nullptr};
    const void* wd = nullptr;
    const void* id = nullptr;
    if (OrtStatus* s = g_api->GetTensorData(wv, &wd)) return s;
    if (OrtStatus* s = g_api->GetTensorData(iv, &id)) return s;
    run.w = static_cast<const uint8_t*>(wd);
    run.ids = static_cast<const int64_t*>(id);
    const int64_t count = is.count();
    for (int64_t i = 0; i < count; ++i)
        if (run.ids[i] < 0 || run.ids[i] >= ws.dims[0])
            return fail("token id " + std::to_string(run.ids[i]) + " is outside the embedding table's " +
                        std::to_string(ws.dims[0]) + " rows");
    std::vector<int64_t> out_dims = is.dims;
    out_dims.push_back(kernel.k);
    OrtValue* yv = nullptr;
    if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, out_dims.data(), out_dims.size(), &yv)) return s;
    void* yd = nullptr;
    if (OrtStatus* s = g_api->GetTensorMutableData(yv, &yd)) return s;
    run.y = static_cast<float*>(yd);
    if (count == 0) return nullptr;
    // a tied table: the output head's GgmlMatMul repacked it and gave the file's pages back
    std::shared_ptr<const PackedCopy> copy;
    if (kernel.reads_copy) copy = find_packed(run.w);
    if (copy != nullptr && copy->type == kernel.type && copy->k == kernel.k && copy->rows == ws.dims[0])
        run.packed = copy->data;
    return parallel(context, gather_task, static_cast<size_t>(count), &run);
}

OrtStatus* gather_create(const OrtKernelInfo* info, void** kernel_out) {
    auto* kernel = new GatherKernel{static_cast<int>(attribute(info, "type", -1)), attribute(info, "K", -1),
                                    repack_enabled() && constant_input(info, 0)};
    const TypeInfo* t = type_info(kernel->type);
    if (t == nullptr || kernel->k <= 0 || kernel->k % t->values != 0) {
        const std::string message = "GgmlGather attributes type=" + std::to_string(kernel->type) +
                                    " K=" + std::to_string(kernel->k) + " do not name a ggml table this library holds";
        delete kernel;
        return fail(message);
    }
    *kernel_out = kernel;
    return nullptr;
}

void destroy_matmul(void* k) { delete static_cast<MatMulKernel*>(k); }
void destroy_gather(void* k) { delete static_cast<GatherKernel*>(k); }

Op* matmul_op() {
    static Op op = [] {
        Op o = make_op("GgmlMatMul", {ort::kFloat, ort::kUint8, ort::kUint8, ort::kUint8}, {false, false, true, true},
                       matmul_create, matmul_compute, destroy_matmul);
        o.base.KernelComputeV2 = [](void* k, OrtKernelContext* c) { return matmul_compute(k, c); };
        o.base.KernelDestroy = destroy_matmul;
        return o;
    }();
    return &op;
}

Op* gather_op() {
    static Op op = [] {
        Op o = make_op("GgmlGather", {ort::kUint8, ort::kInt64}, {false, false}, gather_create, gather_compute,
                       destroy_gather);
        o.base.KernelComputeV2 = [](void* k, OrtKernelContext* c) { return gather_compute(k, c); };
        o.base.KernelDestroy = destroy_gather;
        return o;
    }();
    return &op;
}

}  // namespace
}  // namespace i4p

// ------------------------------------------------------------------ exported entry points
I4P_EXPORT OrtStatus* RegisterCustomOps(OrtSessionOptions* options, const ort::ApiBase* base) {
    using namespace i4p;
    const ort::ApiTable* table = base->GetApi(ort::kApiVersion);
    if (table == nullptr) {
        // the runtime is older than the API these operators call: report it with version 1's table
        const ort::ApiTable* oldest = base->GetApi(1);
        std::string message = "inference4py's ggml operators need onnxruntime's C API version " +
                              std::to_string(ort::kApiVersion) + "; this onnxruntime (" + base->GetVersionString() +
                              ") is older: pip install -U onnxruntime";
        return oldest ? ort::Api(oldest).CreateStatus(ort::kFail, message.c_str()) : nullptr;
    }
    static const ort::Api api(table);
    g_api = &api;
    const ort::Api* apip = &api;
    OrtCustomOpDomain* domain = nullptr;
    if (OrtStatus* s = apip->CreateCustomOpDomain("ai.inference4py", &domain)) return s;
    if (OrtStatus* s = apip->CustomOpDomain_Add(domain, &matmul_op()->base)) return s;
    if (OrtStatus* s = apip->CustomOpDomain_Add(domain, &gather_op()->base)) return s;
    if (OrtStatus* s = apip->CustomOpDomain_Add(domain, &experts_op()->base)) return s;
    // the domain must outlive every session that uses it: it is kept for the process's life
    return apip->AddCustomOpDomain(options, domain);
}

I4P_EXPORT int inference4py_ggml_api_version() { return ort::kApiVersion; }
// The operators' own version: 2 adds GgmlExpertMatMul (engine/kernels.py refuses a library of another one)
I4P_EXPORT int inference4py_ggml_ops_version() { return 2; }
I4P_EXPORT const char* inference4py_ggml_isa() { return i4p::isa_name(i4p::active_table().isa); }
I4P_EXPORT const char* inference4py_ggml_best_isa() { return i4p::isa_name(i4p::best_isa()); }
I4P_EXPORT int inference4py_ggml_set_isa(const char* name) {
    for (i4p::Isa isa : {i4p::Isa::Scalar, i4p::Isa::Avx2, i4p::Isa::Avx512Vnni})
        if (std::strcmp(name, i4p::isa_name(isa)) == 0) return i4p::set_isa(isa) ? 1 : 0;
    return 0;
}
