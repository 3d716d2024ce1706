// What the operators share: see op_support.h.
#include "op_support.h"

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <unordered_map>

namespace i4p {

namespace {

struct QuantizeRun {
    int type;
    const float* x;
    int64_t k;
    uint8_t* act;
    size_t stride;
};

void quantize_task(void* data, size_t index) {
    const QuantizeRun& run = *static_cast<const QuantizeRun*>(data);
    quantize_act_row(run.type, run.x + index * run.k, run.act + index * run.stride, static_cast<int>(run.k));
}

struct RepackRun {
    int type;
    const uint8_t* w;
    size_t w_stride;
    int k;
    uint8_t* out;
};

void repack_task(void* data, size_t index) {
    const RepackRun& run = *static_cast<const RepackRun*>(data);
    repack_rows(run.type, run.w, run.w_stride, static_cast<int>(index), 1, run.k, run.out);
}

const Op& op_of(const ort::CustomOp* base) { return *reinterpret_cast<const Op*>(base); }

// The repacked copies by the address of the constant each was made from (find_packed). Weak: a copy lives
// as long as the operator that made it, and an entry outlives it only until the next one is added.
struct CopyRegistry {
    std::mutex lock;
    std::unordered_map<const uint8_t*, std::weak_ptr<const PackedCopy>> copies;
};

CopyRegistry& registry() {
    // never destroyed: a session may be released after the library's static destructors have run
    static CopyRegistry* copies = new CopyRegistry;
    return *copies;
}

void register_copy(const uint8_t* source, const std::shared_ptr<const PackedCopy>& copy) {
    CopyRegistry& r = registry();
    std::lock_guard<std::mutex> hold(r.lock);
    for (auto it = r.copies.begin(); it != r.copies.end();)
        it = it->second.expired() ? r.copies.erase(it) : std::next(it);
    r.copies[source] = copy;
}

}  // namespace

const ort::Api* g_api = nullptr;

OrtStatus* fail(const std::string& message) {
    return g_api->CreateStatus(ort::kInvalidArgument, ("inference4py ggml operator: " + message).c_str());
}

int64_t attribute(const OrtKernelInfo* info, const char* name, int64_t fallback) {
    int64_t value = fallback;
    OrtStatus* status = g_api->KernelInfoGetAttribute_int64(info, name, &value);
    if (status != nullptr) {
        g_api->ReleaseStatus(status);
        return fallback;
    }
    return value;
}

OrtStatus* shape_of(const OrtValue* value, Shape* out) {
    OrtTensorTypeAndShapeInfo* info = nullptr;
    if (OrtStatus* s = g_api->GetTensorTypeAndShape(value, &info)) return s;
    size_t rank = 0;
    OrtStatus* s = g_api->GetDimensionsCount(info, &rank);
    if (s == nullptr) {
        out->dims.assign(rank, 0);
        s = g_api->GetDimensions(info, out->dims.data(), rank);
    }
    if (s == nullptr) s = g_api->GetTensorElementType(info, &out->element_type);
    g_api->ReleaseTensorTypeAndShapeInfo(info);
    return s;
}

std::string dims_text(const std::vector<int64_t>& dims) {
    std::string text = "[";
    for (size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
    return text + "]";
}

size_t row_bytes(int type, int64_t k) {
    const TypeInfo* t = type_info(type);
    return static_cast<size_t>(k / t->values) * t->bytes;
}

OrtStatus* parallel(OrtKernelContext* context, void (*fn)(void*, size_t), size_t total, void* data) {
    if (total == 1) {
        fn(data, 0);
        return nullptr;
    }
    return g_api->KernelContext_ParallelFor(context, fn, total, 0, data);
}

OrtStatus* round_activations(OrtKernelContext* context, int type, const float* x, int64_t rows, int64_t k,
                             std::vector<uint8_t>* out, size_t* stride) {
    *stride = act_row_bytes(type, static_cast<int>(k));
    out->resize(*stride * static_cast<size_t>(rows));
    QuantizeRun q{type, x, k, out->data(), *stride};
    return parallel(context, quantize_task, static_cast<size_t>(rows), &q);
}

OrtStatus* round_for_weights(OrtKernelContext* context, const int* types, int weights, const float* x, int64_t rows,
                             int64_t k, std::vector<uint8_t>* buffers, const uint8_t** act, size_t* stride) {
    for (int i = 0; i < weights; ++i) {
        int same = -1;
        for (int j = 0; j < i; ++j)
            if (type_info(types[j])->act == type_info(types[i])->act) same = j;
        if (same >= 0) {
            act[i] = act[same];
            stride[i] = stride[same];
            continue;
        }
        if (OrtStatus* s = round_activations(context, types[i], x, rows, k, &buffers[i], &stride[i])) return s;
        act[i] = buffers[i].data();
    }
    return nullptr;
}

void dot_weight_rows(const KernelTable& table, int type, int k, const uint8_t* w, size_t w_stride,
                     const uint8_t* packed, int64_t first, int rows, const uint8_t* act, size_t act_stride, int cols,
                     float* out, size_t out_stride) {
    if (packed != nullptr) {
        table.dot_packed[type](type, packed + first / kPackRows * packed_group_bytes(type, k), rows / kPackRows, act,
                               act_stride, cols, k, out, out_stride);
        return;
    }
    DotTileFn fn = table.dot_tile[type] ? table.dot_tile[type] : scalar::dot_tile;
    fn(type, w + first * w_stride, w_stride, rows, act, act_stride, cols, k, out, out_stride);
}

bool gate_attribute(const OrtKernelInfo* info, const char* op, Gate* gate, OrtStatus** status) {
    const int64_t value = attribute(info, "gate", 0);
    if (value < 0 || value > 2) {
        *status = fail(std::string(op) + " attribute gate=" + std::to_string(value) +
                       " is not 0 (none), 1 (silu) or 2 (gelu_tanh)");
        return false;
    }
    *gate = static_cast<Gate>(value);
    return true;
}

bool constant_input(const OrtKernelInfo* info, size_t index) {
    int constant = 0;
    const OrtValue* value = nullptr;
    OrtStatus* status = g_api->KernelInfoGetConstantInput_tensor(info, index, &constant, &value);
    if (status != nullptr) {
        g_api->ReleaseStatus(status);
        return false;
    }
    return constant != 0;
}

bool repack_enabled() {
    const char* repack = std::getenv("INFERENCE4PY_GGML_REPACK");
    return repack == nullptr || std::strcmp(repack, "0") != 0;
}

const uint8_t* packed_weight(PackedWeight& p, int type, int64_t k, const KernelTable& table, const uint8_t* w,
                             int64_t rows, size_t stride, OrtKernelContext* context, OrtStatus** status) {
    if (!p.constant || table.dot_packed[type] == nullptr || rows % kPackRows != 0) return nullptr;
    if (p.source.load(std::memory_order_acquire) == w) return p.copy->data;
    std::lock_guard<std::mutex> lock(p.making);
    if (p.source.load(std::memory_order_relaxed) == w) return p.copy->data;
    if (p.copy != nullptr) return nullptr;  // a constant at another address: never seen, read as it comes
    const size_t group = packed_group_bytes(type, k);
    const size_t bytes = group * static_cast<size_t>(rows / kPackRows);
    uint8_t* data = allocate_packed(bytes);
    if (data == nullptr) return nullptr;  // no room for the copy: the file's rows serve
    auto copy = std::make_shared<const PackedCopy>(data, bytes, type, k, rows);
    prefault(w, stride * static_cast<size_t>(rows));
    RepackRun run{type, w, stride, static_cast<int>(k), data};
    if ((*status = parallel(context, repack_task, static_cast<size_t>(rows / kPackRows), &run)) != nullptr) return nullptr;
    release_file_pages(w, stride * static_cast<size_t>(rows));  // the copy replaces the file's pages in memory
    register_copy(w, copy);
    p.copy = std::move(copy);
    p.source.store(w, std::memory_order_release);
    return p.copy->data;
}

std::shared_ptr<const PackedCopy> find_packed(const uint8_t* source) {
    CopyRegistry& r = registry();
    std::lock_guard<std::mutex> hold(r.lock);
    const auto it = r.copies.find(source);
    return it == r.copies.end() ? nullptr : it->second.lock();
}

Op make_op(const char* name, std::vector<int> types, std::vector<bool> optional,
           OrtStatus* (*create)(const OrtKernelInfo*, void**), OrtStatus* (*compute)(void*, OrtKernelContext*),
           void (*destroy)(void*)) {
    Op op{};
    op.name = name;
    op.input_types = std::move(types);
    op.optional = std::move(optional);
    op.create = create;
    op.compute = compute;
    op.destroy = destroy;
    ort::CustomOp& b = op.base;
    b.version = ort::kCustomOpVersion;
    b.GetName = [](const ort::CustomOp* o) { return op_of(o).name; };
    b.GetExecutionProviderType = [](const ort::CustomOp*) -> const char* { return "CPUExecutionProvider"; };
    b.GetInputType = [](const ort::CustomOp* o, size_t i) { return op_of(o).input_types[i]; };
    b.GetInputTypeCount = [](const ort::CustomOp* o) { return op_of(o).input_types.size(); };
    b.GetOutputType = [](const ort::CustomOp*, size_t) { return static_cast<int>(ort::kFloat); };
    b.GetOutputTypeCount = [](const ort::CustomOp*) -> size_t { return 1; };
    b.GetInputCharacteristic = [](const ort::CustomOp* o, size_t i) -> int {
        return op_of(o).optional[i] ? ort::kOptional : ort::kRequired;
    };
    b.GetOutputCharacteristic = [](const ort::CustomOp*, size_t) -> int { return ort::kRequired; };
    b.GetInputMemoryType = [](const ort::CustomOp*, size_t) -> int { return ort::kMemTypeDefault; };
    b.GetVariadicInputMinArity = [](const ort::CustomOp*) { return 1; };
    b.GetVariadicInputHomogeneity = [](const ort::CustomOp*) { return 1; };
    b.GetVariadicOutputMinArity = [](const ort::CustomOp*) { return 1; };
    b.GetVariadicOutputHomogeneity = [](const ort::CustomOp*) { return 1; };
    b.CreateKernelV2 = [](const ort::CustomOp* o, const ort::ApiTable*, const OrtKernelInfo* info, void** kernel) {
        return op_of(o).create(info, kernel);
    };
    return op;
}

}  // namespace i4p
