// GgmlExpertMatMul: each token's products with the weights of the experts a router chose for it
// (a mixture-of-experts layer): Y[t, j] = X[t] (or X[t, j]) @ W[ids[t, j]].T, or with a gate
// act(X @ W0[e].T) * (X @ W1[e].T). The tokens are grouped by expert, so each chosen expert's blocks
// are read once for all the tokens that chose it, and the other experts' blocks are not read at all.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "op_support.h"

namespace i4p {
namespace {

constexpr int kTile = 8;          // activation rows a kernel takes at once
constexpr int kRowsPerTask = 16;  // a task's weight rows, at least (a multiple of it: whole repacked groups)
constexpr int64_t kTasks = 32;    // tasks a decode step is spread over

struct ExpertsKernel {
    int types[2];
    int weights;  // 1, or 2 with a gate (gate, up)
    int64_t k;
    int64_t experts;
    bool float_activations;
    Gate gate;
    bool repack;
    PackedWeight packed[2];
};

struct ExpertsRun {
    const ExpertsKernel* kernel;
    const KernelTable* table;
    const float* x;  // the input rows, K floats each
    int64_t n;       // rows of one expert's matrix
    const uint8_t* w[2];
    size_t w_stride[2];
    const uint8_t* packed[2];
    const uint8_t* act[2];  // the input rows rounded for each weight's type
    size_t act_stride[2];
    // the (output row, input row) pairs grouped by expert: expert e's are pairs[start[e] .. start[e + 1])
    std::vector<int64_t> start;
    std::vector<std::pair<int64_t, int64_t>> pairs;
    std::vector<std::pair<int64_t, int64_t>> tasks;  // (expert, its first weight row)
    int64_t rows_per_task;
    float* y;  // [output rows, n]
};

// rows [first, first + rows) of expert e's matrix `which` against `cols` activation rows `act` (a tile)
void dot(const ExpertsRun& run, int which, int64_t e, int64_t first, int rows, const uint8_t* act, size_t act_stride,
         int cols, float* out) {
    dot_weight_rows(*run.table, run.kernel->types[which], static_cast<int>(run.kernel->k), run.w[which],
                    run.w_stride[which], run.packed[which], e * run.n + first, rows, act, act_stride, cols, out,
                    static_cast<size_t>(rows));
}

void experts_task(void* data, size_t index) {
    const ExpertsRun& run = *static_cast<const ExpertsRun*>(data);
    const ExpertsKernel& kernel = *run.kernel;
    const auto [e, first] = run.tasks[index];
    const int rows = static_cast<int>(std::min<int64_t>(run.rows_per_task, run.n - first));
    const int k = static_cast<int>(kernel.k);
    std::vector<float> parts[2];
    std::vector<uint8_t> tile[2];  // a tile of the expert's tokens' rounded rows, side by side
    for (int which = 0; which < kernel.weights; ++which) {
        parts[which].resize(static_cast<size_t>(rows) * kTile);
        if (!kernel.float_activations) tile[which].resize(run.act_stride[which] * kTile);
    }
    for (int64_t p = run.start[e]; p < run.start[e + 1]; p += kTile) {
        const int cols = static_cast<int>(std::min<int64_t>(kTile, run.start[e + 1] - p));
        for (int which = 0; which < kernel.weights; ++which) {
            if (kernel.float_activations) {
                const int type = kernel.types[which];
                for (int c = 0; c < cols; ++c)
                    scalar::dot_rows_float(type, run.w[which] + (e * run.n + first) * run.w_stride[which],
                                           run.w_stride[which], rows, run.x + run.pairs[p + c].second * k, k,
                                           parts[which].data() + c * rows, 1);
                continue;
            }
            const size_t stride = run.act_stride[which];
            for (int c = 0; c < cols; ++c)
                std::copy_n(run.act[which] + run.pairs[p + c].second * stride, stride, tile[which].data() + c * stride);
            dot(run, which, e, first, rows, tile[which].data(), stride, cols, parts[which].data());
        }
        for (int c = 0; c < cols; ++c) {
            float* out = run.y + run.pairs[p + c].first * run.n + first;
            const float* g = parts[0].data() + c * rows;
            if (kernel.gate == Gate::None) {
                std::copy_n(g, rows, out);
            } else {
                const float* u = parts[1].data() + c * rows;
                for (int r = 0; r < rows; ++r) out[r] = gate_value(kernel.gate, g[r]) * u[r];
            }
        }
    }
}

OrtStatus* experts_compute(void* kernel_ptr, OrtKernelContext* context) {
    ExpertsKernel& kernel = *static_cast<ExpertsKernel*>(kernel_ptr);
    const OrtValue* x_value = nullptr;
    const OrtValue* ids_value = nullptr;
    if (OrtStatus* s = g_api->KernelContext_GetInput(context, 0, &x_value)) return s;
    if (OrtStatus* s = g_api->KernelContext_GetInput(context, 1, &ids_value)) return s;
    Shape xs, is;
    if (OrtStatus* s = shape_of(x_value, &xs)) return s;
    if (OrtStatus* s = shape_of(ids_value, &is)) return s;
    if (is.dims.empty())
        return fail("GgmlExpertMatMul input ids must be [..., k] (the chosen experts of each token), not a scalar");
    const int64_t slots = is.dims.back();
    const int64_t tokens = slots > 0 ? is.count() / slots : 0;
    // X: one row per token shared by its k experts ([..., K]), or one per chosen expert ([..., k, K])
    const bool per_slot = xs.dims.size() == is.dims.size() + 1;
    bool same = (per_slot || xs.dims.size() == is.dims.size()) && !xs.dims.empty() && xs.dims.back() == kernel.k;
    for (size_t d = 0; same && d + 1 < is.dims.size(); ++d) same = xs.dims[d] == is.dims[d];
    if (same && per_slot) same = xs.dims[is.dims.size() - 1] == slots;
    if (!same)
        return fail("GgmlExpertMatMul input X has shape " + dims_text(xs.dims) + " and ids " + dims_text(is.dims) +
                    ": X must be ids' shape with K=" + std::to_string(kernel.k) +
                    " for the last axis, or ids' shape followed by K (one row per chosen expert)");
    ExpertsRun run{};
    run.kernel = &kernel;
    run.table = &active_table();
    const void* x_data = nullptr;
    const void* id_data = nullptr;
    if (OrtStatus* s = g_api->GetTensorData(x_value, &x_data)) return s;
    if (OrtStatus* s = g_api->GetTensorData(ids_value, &id_data)) return s;
    run.x = static_cast<const float*>(x_data);
    for (int i = 0; i < kernel.weights; ++i) {
        const OrtValue* wv = nullptr;
        if (OrtStatus* s = g_api->KernelContext_GetInput(context, 2 + i, &wv)) return s;
        if (wv == nullptr) return fail("GgmlExpertMatMul weight input " + std::to_string(2 + i) + " is missing");
        Shape ws;
        if (OrtStatus* s = shape_of(wv, &ws)) return s;
        const size_t bytes = row_bytes(kernel.types[i], kernel.k);
        const int64_t total = ws.dims.size() == 3 ? ws.dims[0] * ws.dims[1] : ws.dims.empty() ? 0 : ws.dims[0];
        const bool fits = (ws.dims.size() == 3 && ws.dims[0] == kernel.experts && ws.dims[2] == static_cast<int64_t>(bytes)) ||
                          (ws.dims.size() == 2 && ws.dims[1] == static_cast<int64_t>(bytes) && total % kernel.experts == 0);
        if (!fits)
            return fail(std::string("GgmlExpertMatMul weight ") + std::to_string(i) + " of type " +
                        type_info(kernel.types[i])->name + " has shape " + dims_text(ws.dims) + ", expected [" +
                        std::to_string(kernel.experts) + ", rows, " + std::to_string(bytes) +
                        "] (or those rows together) for experts=" + std::to_string(kernel.experts) +
                        " and K=" + std::to_string(kernel.k));
        const int64_t n = total / kernel.experts;
        if (i > 0 && n != run.n)
            return fail("GgmlExpertMatMul with a gated activation takes two weights of equal rows (gate, up)");
        run.n = n;
        const void* wd = nullptr;
        if (OrtStatus* s = g_api->GetTensorData(wv, &wd)) return s;
        run.w[i] = static_cast<const uint8_t*>(wd);
        run.w_stride[i] = bytes;
        OrtStatus* packing = nullptr;
        if (kernel.repack && !kernel.float_activations && n % kPackRows == 0)  // groups never straddle two experts
            run.packed[i] = packed_weight(kernel.packed[i], kernel.types[i], kernel.k, *run.table, run.w[i], total,
                                          bytes, context, &packing);
        if (packing != nullptr) return packing;
    }
    std::vector<int64_t> out_dims = is.dims;
    out_dims.push_back(run.n);
    OrtValue* y_value = nullptr;
    if (OrtStatus* s = g_api->KernelContext_GetOutput(context, 0, out_dims.data(), out_dims.size(), &y_value)) return s;
    void* y_data = nullptr;
    if (OrtStatus* s = g_api->GetTensorMutableData(y_value, &y_data)) return s;
    run.y = static_cast<float*>(y_data);
    if (tokens == 0 || slots == 0 || run.n == 0) return nullptr;

    // the (output row, input row) pairs, grouped by expert (counting sort: the order within an expert is the tokens')
    const int64_t* ids = static_cast<const int64_t*>(id_data);
    run.start.assign(static_cast<size_t>(kernel.experts) + 1, 0);
    for (int64_t i = 0; i < tokens * slots; ++i) {
        if (ids[i] < 0 || ids[i] >= kernel.experts)
            return fail("GgmlExpertMatMul: expert id " + std::to_string(ids[i]) + " is outside [0, " +
                        std::to_string(kernel.experts) + ")");
        ++run.start[ids[i] + 1];
    }
    for (int64_t e = 0; e < kernel.experts; ++e) run.start[e + 1] += run.start[e];
    run.pairs.resize(static_cast<size_t>(tokens * slots));
    std::vector<int64_t> next(run.start.begin(), run.start.end() - 1);
    for (int64_t i = 0; i < tokens * slots; ++i) run.pairs[next[ids[i]]++] = {i, per_slot ? i : i / slots};

    // tasks: row ranges of each chosen expert; a decode step's few experts are split finer
    int64_t used = 0;
    for (int64_t e = 0; e < kernel.experts; ++e) used += run.start[e + 1] > run.start[e];
    const int64_t spread = (run.n * used + kTasks - 1) / kTasks;
    run.rows_per_task = std::max<int64_t>(kRowsPerTask, (spread + kRowsPerTask - 1) / kRowsPerTask * kRowsPerTask);
    if (tokens * slots > used * kTile) run.rows_per_task = kRowsPerTask;  // many tokens an expert: rows stay in cache
    for (int64_t e = 0; e < kernel.experts; ++e)
        if (run.start[e + 1] > run.start[e])
            for (int64_t first = 0; first < run.n; first += run.rows_per_task) run.tasks.emplace_back(e, first);

    std::vector<uint8_t> buffers[2];
    if (!kernel.float_activations)
        if (OrtStatus* s = round_for_weights(context, kernel.types, kernel.weights, run.x,
                                             per_slot ? tokens * slots : tokens, kernel.k, buffers, run.act, run.act_stride))
            return s;
    return parallel(context, experts_task, run.tasks.size(), &run);
}

OrtStatus* experts_create(const OrtKernelInfo* info, void** kernel_out) {
    auto* kernel = new ExpertsKernel{};
    kernel->k = attribute(info, "K", -1);
    kernel->experts = attribute(info, "experts", -1);
    kernel->float_activations = attribute(info, "float_activations", 0) != 0;
    kernel->repack = repack_enabled();
    OrtStatus* bad = nullptr;
    if (!gate_attribute(info, "GgmlExpertMatMul", &kernel->gate, &bad)) {
        delete kernel;
        return bad;
    }
    size_t inputs = 0;
    if (OrtStatus* s = g_api->KernelInfo_GetInputCount(info, &inputs)) {
        delete kernel;
        return s;
    }
    kernel->weights = static_cast<int>(std::min<size_t>(inputs - 2, 2));
    std::string problem;
    if (kernel->experts <= 0) problem = "attribute experts=" + std::to_string(kernel->experts) + " must be positive";
    if ((kernel->gate != Gate::None) != (kernel->weights == 2))
        problem = "takes two weights (gate, up) with a gate attribute, and one without";
    const char* names[2] = {"type", "type1"};
    for (int i = 0; i < kernel->weights && problem.empty(); ++i) {
        kernel->packed[i].constant = constant_input(info, 2 + i);
        kernel->types[i] = static_cast<int>(attribute(info, names[i], -1));
        const TypeInfo* t = type_info(kernel->types[i]);
        if (t == nullptr)
            problem = "attribute " + std::string(names[i]) + "=" + std::to_string(kernel->types[i]) +
                      " is not a ggml type this library holds; upgrade inference4py or convert the file with --bits 32";
        else if (kernel->k <= 0 || kernel->k % t->values != 0)
            problem = "attribute K=" + std::to_string(kernel->k) + " is not a positive multiple of " + t->name +
                      "'s block of " + std::to_string(t->values);
    }
    if (!problem.empty()) {
        delete kernel;
        return fail("GgmlExpertMatMul " + problem);
    }
    *kernel_out = kernel;
    return nullptr;
}

void destroy_experts(void* k) { delete static_cast<ExpertsKernel*>(k); }

}  // namespace

Op* experts_op() {
    static Op op = [] {
        Op o = make_op("GgmlExpertMatMul", {ort::kFloat, ort::kInt64, ort::kUint8, ort::kUint8},
                       {false, false, false, true}, experts_create, experts_compute, destroy_experts);
        o.base.KernelComputeV2 = [](void* k, OrtKernelContext* c) { return experts_compute(k, c); };
        o.base.KernelDestroy = destroy_experts;
        return o;
    }();
    return &op;
}

}  // namespace i4p
