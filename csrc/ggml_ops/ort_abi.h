// The part of onnxruntime's C ABI these operators use, declared here (onnxruntime's wheels ship
// no headers). The OrtApi table is append-only: each function keeps its slot in every release,
// and a runtime serving API version N has every slot up to N's last. We ask for version 18
// (onnxruntime 1.18, the package's floor): KernelContext_ParallelFor (slot 274) is the newest
// entry called. GetApi answers null when the runtime is older: RegisterCustomOps reports that.
// Every entry below is called by the sessions of tests/kernels (an operator made, run and refused).
#pragma once

#include <cstddef>
#include <cstdint>

struct OrtStatus;
struct OrtKernelInfo;
struct OrtKernelContext;
struct OrtValue;
struct OrtTensorTypeAndShapeInfo;
struct OrtSessionOptions;
struct OrtCustomOpDomain;

namespace ort {

constexpr uint32_t kApiVersion = 18;
constexpr uint32_t kCustomOpVersion = 18;  // the OrtCustomOp fields through ReleaseAliasMap are read

// ONNXTensorElementDataType
enum ElementType : int { kFloat = 1, kUint8 = 2, kInt64 = 7 };
// OrtErrorCode
enum ErrorCode : int { kOk = 0, kFail = 1, kInvalidArgument = 2 };
// OrtCustomOpInputOutputCharacteristic
enum Characteristic : int { kRequired = 0, kOptional = 1 };
// OrtMemType
enum MemType : int { kMemTypeDefault = 0 };

struct ApiTable;  // OrtApi: a table of function pointers, read by slot

struct ApiBase {  // OrtApiBase: never grows
    const ApiTable* (*GetApi)(uint32_t version);
    const char* (*GetVersionString)();
};

// Slots of the OrtApi table (index of the function pointer), with the API version that added each.
namespace slot {
constexpr int CreateStatus = 0;                    // 1
constexpr int CreateCustomOpDomain = 26;           // 1
constexpr int CustomOpDomain_Add = 27;             // 1
constexpr int AddCustomOpDomain = 28;              // 1
constexpr int GetTensorMutableData = 51;           // 1
constexpr int GetTensorElementType = 60;           // 1
constexpr int GetDimensionsCount = 61;             // 1
constexpr int GetDimensions = 62;                  // 1
constexpr int GetTensorTypeAndShape = 65;          // 1
constexpr int KernelInfoGetAttribute_int64 = 86;   // 1
constexpr int KernelContext_GetInput = 90;         // 1
constexpr int KernelContext_GetOutput = 91;        // 1
constexpr int ReleaseStatus = 93;                  // 1
constexpr int ReleaseTensorTypeAndShapeInfo = 99;  // 1
constexpr int KernelInfo_GetInputCount = 230;      // 14
constexpr int KernelInfoGetConstantInput_tensor = 249;  // 15
constexpr int KernelContext_ParallelFor = 274;     // 17
}  // namespace slot

// Typed calls through the table.
class Api {
   public:
    explicit Api(const ApiTable* table) : table_(reinterpret_cast<void* const*>(table)) {}

    OrtStatus* CreateStatus(int code, const char* message) const {
        return fn<OrtStatus* (*)(int, const char*)>(slot::CreateStatus)(code, message);
    }
    OrtStatus* CreateCustomOpDomain(const char* name, OrtCustomOpDomain** out) const {
        return fn<OrtStatus* (*)(const char*, OrtCustomOpDomain**)>(slot::CreateCustomOpDomain)(name, out);
    }
    OrtStatus* CustomOpDomain_Add(OrtCustomOpDomain* domain, const void* op) const {
        return fn<OrtStatus* (*)(OrtCustomOpDomain*, const void*)>(slot::CustomOpDomain_Add)(domain, op);
    }
    OrtStatus* AddCustomOpDomain(OrtSessionOptions* options, OrtCustomOpDomain* domain) const {
        return fn<OrtStatus* (*)(OrtSessionOptions*, OrtCustomOpDomain*)>(slot::AddCustomOpDomain)(options, domain);
    }
    OrtStatus* GetTensorMutableData(OrtValue* value, void** out) const {
        return fn<OrtStatus* (*)(OrtValue*, void**)>(slot::GetTensorMutableData)(value, out);
    }
    // reading an input: the mutable accessor (GetTensorData is API 23) on a value we never write
    OrtStatus* GetTensorData(const OrtValue* value, const void** out) const {
        void* data = nullptr;
        OrtStatus* status = GetTensorMutableData(const_cast<OrtValue*>(value), &data);
        *out = data;
        return status;
    }
    OrtStatus* GetTensorElementType(const OrtTensorTypeAndShapeInfo* info, int* out) const {
        return fn<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int*)>(slot::GetTensorElementType)(info, out);
    }
    OrtStatus* GetDimensionsCount(const OrtTensorTypeAndShapeInfo* info, size_t* out) const {
        return fn<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, size_t*)>(slot::GetDimensionsCount)(info, out);
    }
    OrtStatus* GetDimensions(const OrtTensorTypeAndShapeInfo* info, int64_t* dims, size_t count) const {
        return fn<OrtStatus* (*)(const OrtTensorTypeAndShapeInfo*, int64_t*, size_t)>(slot::GetDimensions)(info, dims,
                                                                                                          count);
    }
    OrtStatus* GetTensorTypeAndShape(const OrtValue* value, OrtTensorTypeAndShapeInfo** out) const {
        return fn<OrtStatus* (*)(const OrtValue*, OrtTensorTypeAndShapeInfo**)>(slot::GetTensorTypeAndShape)(value, out);
    }
    OrtStatus* KernelInfoGetAttribute_int64(const OrtKernelInfo* info, const char* name, int64_t* out) const {
        return fn<OrtStatus* (*)(const OrtKernelInfo*, const char*, int64_t*)>(slot::KernelInfoGetAttribute_int64)(
            info, name, out);
    }
    OrtStatus* KernelContext_GetInput(const OrtKernelContext* context, size_t index, const OrtValue** out) const {
        return fn<OrtStatus* (*)(const OrtKernelContext*, size_t, const OrtValue**)>(slot::KernelContext_GetInput)(
            context, index, out);
    }
    OrtStatus* KernelContext_GetOutput(OrtKernelContext* context, size_t index, const int64_t* dims, size_t count,
                                       OrtValue** out) const {
        return fn<OrtStatus* (*)(OrtKernelContext*, size_t, const int64_t*, size_t, OrtValue**)>(
            slot::KernelContext_GetOutput)(context, index, dims, count, out);
    }
    void ReleaseStatus(OrtStatus* status) const { fn<void (*)(OrtStatus*)>(slot::ReleaseStatus)(status); }
    void ReleaseTensorTypeAndShapeInfo(OrtTensorTypeAndShapeInfo* info) const {
        fn<void (*)(OrtTensorTypeAndShapeInfo*)>(slot::ReleaseTensorTypeAndShapeInfo)(info);
    }
    OrtStatus* KernelInfo_GetInputCount(const OrtKernelInfo* info, size_t* out) const {
        return fn<OrtStatus* (*)(const OrtKernelInfo*, size_t*)>(slot::KernelInfo_GetInputCount)(info, out);
    }
    // whether input `index` is a constant initializer (not a graph input a caller may feed)
    OrtStatus* KernelInfoGetConstantInput_tensor(const OrtKernelInfo* info, size_t index, int* is_constant,
                                                 const OrtValue** out) const {
        return fn<OrtStatus* (*)(const OrtKernelInfo*, size_t, int*, const OrtValue**)>(
            slot::KernelInfoGetConstantInput_tensor)(info, index, is_constant, out);
    }
    // fn(data, i) for i in [0, total), on the session's intra-op threads; batches: 0 lets onnxruntime choose
    OrtStatus* KernelContext_ParallelFor(OrtKernelContext* context, void (*task)(void*, size_t), size_t total,
                                         size_t batches, void* data) const {
        return fn<OrtStatus* (*)(const OrtKernelContext*, void (*)(void*, size_t), size_t, size_t, void*)>(
            slot::KernelContext_ParallelFor)(context, task, total, batches, data);
    }

   private:
    template <typename F>
    F fn(int index) const {
        return reinterpret_cast<F>(table_[index]);
    }
    void* const* table_;
};

// OrtCustomOp, the fields through API 18 (ORT reads those its `version` admits).
struct CustomOp {
    uint32_t version;
    void* (*CreateKernel)(const CustomOp*, const ApiTable*, const OrtKernelInfo*);
    const char* (*GetName)(const CustomOp*);
    const char* (*GetExecutionProviderType)(const CustomOp*);
    int (*GetInputType)(const CustomOp*, size_t);
    size_t (*GetInputTypeCount)(const CustomOp*);
    int (*GetOutputType)(const CustomOp*, size_t);
    size_t (*GetOutputTypeCount)(const CustomOp*);
    void (*KernelCompute)(void*, OrtKernelContext*);
    void (*KernelDestroy)(void*);
    int (*GetInputCharacteristic)(const CustomOp*, size_t);
    int (*GetOutputCharacteristic)(const CustomOp*, size_t);
    int (*GetInputMemoryType)(const CustomOp*, size_t);
    int (*GetVariadicInputMinArity)(const CustomOp*);
    int (*GetVariadicInputHomogeneity)(const CustomOp*);
    int (*GetVariadicOutputMinArity)(const CustomOp*);
    int (*GetVariadicOutputHomogeneity)(const CustomOp*);
    OrtStatus* (*CreateKernelV2)(const CustomOp*, const ApiTable*, const OrtKernelInfo*, void**);
    OrtStatus* (*KernelComputeV2)(void*, OrtKernelContext*);
    OrtStatus* (*InferOutputShapeFn)(const CustomOp*, void*);
    int (*GetStartVersion)(const CustomOp*);
    int (*GetEndVersion)(const CustomOp*);
    size_t (*GetMayInplace)(int**, int**);
    void (*ReleaseMayInplace)(int*, int*);
    size_t (*GetAliasMap)(int**, int**);
    void (*ReleaseAliasMap)(int*, int*);
};

static_assert(sizeof(ApiBase) == 2 * sizeof(void*), "OrtApiBase is two pointers");
static_assert(sizeof(CustomOp) == 208, "OrtCustomOp through ReleaseAliasMap is 208 bytes on LP64");
static_assert(offsetof(CustomOp, CreateKernelV2) == 136, "OrtCustomOp::CreateKernelV2 offset");

}  // namespace ort
