// Weights rearranged eight rows at a time for the kernels that read them so (simd.inc), made once
// when an operator first runs; and the file's own pages given back once a weight is repacked.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

#include "kernels.h"

namespace i4p {

size_t packed_group_bytes(int type, int k) {
    if (type == T_Q4_K) return sizeof(BlockQ4Kx8) * static_cast<size_t>(k / QK_K);
    if (type == T_Q6_K) return sizeof(BlockQ6Kx8) * static_cast<size_t>(k / QK_K);
    const size_t blocks = static_cast<size_t>(k / QK);
    if (type == T_Q4_0) return sizeof(BlockQ4_0x8) * blocks;
    if (type == T_Q4_1) return sizeof(BlockQ4_1x8) * blocks;
    if (type == T_Q5_0) return sizeof(BlockQ5_0x8) * blocks;
    if (type == T_Q8_0) return sizeof(BlockQ8_0x8) * blocks;
    if (type == T_MXFP4) return sizeof(BlockMXFP4x8) * blocks;
    return 0;
}

namespace {

// One row's bytes between its file block and its lane of a packed block, the direction given by which side
// is const: a const file block is packed into the lane, a const packed block unpacked into the file block.
// Each layout below is so written once for repack_rows and unpack_row, which are inverses by construction.
inline void carry(const void* file, void* lane, size_t n) { std::memcpy(lane, file, n); }
inline void carry(void* file, const void* lane, size_t n) { std::memcpy(file, lane, n); }

// lane i of a Q4_K x 8 block: File/Packed are (const BlockQ4_K, BlockQ4Kx8) to pack, the reverse to unpack
template <typename File, typename Packed>
void lane_q4_k(File& x, Packed& o, int i) {
    carry(&x.d, &o.d[i], 2);
    carry(&x.dmin, &o.dmin[i], 2);
    for (int j = 0; j < 12; ++j) carry(&x.scales[j], &o.scales[j][i], 1);
    for (int chunk = 0; chunk < 4; ++chunk)
        for (int g = 0; g < 8; ++g) carry(x.qs + 32 * chunk + 4 * g, &o.qs[chunk][g][4 * i], 4);
}

template <typename File, typename Packed>
void lane_q6_k(File& x, Packed& o, int i) {
    carry(&x.d, &o.d[i], 2);
    for (int s = 0; s < 16; ++s) carry(&x.scales[s], &o.scales[s / 2][i][s % 2], 1);
    for (int n = 0; n < 2; ++n)
        for (int g = 0; g < 8; ++g) {
            for (int m = 0; m < 2; ++m) carry(x.ql + 64 * n + 32 * m + 4 * g, &o.q[n][g][m][4 * i], 4);
            carry(x.qh + 32 * n + 4 * g, &o.q[n][g][2][4 * i], 4);
        }
}

// the 32-value types: each row's scale fields as stored, its code bytes four at a time into its lane
template <typename File, typename Packed>
void lane_32(File& x, Packed& o, int i) {
    using In = std::remove_const_t<File>;
    constexpr int kGroups = sizeof(Packed::qs) / sizeof(Packed::qs[0]);
    if constexpr (std::is_same_v<In, BlockMXFP4>) carry(&x.e, &o.e[i], 1);
    else carry(&x.d, &o.d[i], 2);
    if constexpr (std::is_same_v<In, BlockQ4_1>) carry(&x.m, &o.m[i], 2);
    if constexpr (std::is_same_v<In, BlockQ5_0>) carry(x.qh, &o.qh[i], 4);
    for (int g = 0; g < kGroups; ++g) carry(x.qs + 4 * g, &o.qs[g][4 * i], 4);
}

// `nb` blocks of the eight rows at `w` into the packed blocks `out`
template <typename In, typename Out>
void pack_group(const uint8_t* w, size_t w_stride, int nb, Out* out) {
    for (int b = 0; b < nb; ++b)
        for (int i = 0; i < kPackRows; ++i) {
            const In& x = reinterpret_cast<const In*>(w + i * w_stride)[b];
            if constexpr (std::is_same_v<In, BlockQ4_K>) lane_q4_k(x, out[b], i);
            else if constexpr (std::is_same_v<In, BlockQ6_K>) lane_q6_k(x, out[b], i);
            else lane_32(x, out[b], i);
        }
}

// lane i of the `nb` packed blocks `group` back into the file's row `out`
template <typename In, typename Out>
void unpack_lane(const Out* group, int nb, int i, uint8_t* out) {
    for (int b = 0; b < nb; ++b) {
        In& x = reinterpret_cast<In*>(out)[b];
        if constexpr (std::is_same_v<In, BlockQ4_K>) lane_q4_k(x, group[b], i);
        else if constexpr (std::is_same_v<In, BlockQ6_K>) lane_q6_k(x, group[b], i);
        else lane_32(x, group[b], i);
    }
}

template <typename FileBlock, typename PackedBlock>
struct Layout {
    using In = FileBlock;
    using Out = PackedBlock;
};

// fn(Layout<file block, packed block>{}, blocks a row) for a repacked type; nothing for another
template <typename Fn>
void with_layout(int type, int k, Fn&& fn) {
    switch (type) {
        case T_Q4_K: fn(Layout<BlockQ4_K, BlockQ4Kx8>{}, k / QK_K); return;
        case T_Q6_K: fn(Layout<BlockQ6_K, BlockQ6Kx8>{}, k / QK_K); return;
        case T_Q4_0: fn(Layout<BlockQ4_0, BlockQ4_0x8>{}, k / QK); return;
        case T_Q4_1: fn(Layout<BlockQ4_1, BlockQ4_1x8>{}, k / QK); return;
        case T_Q5_0: fn(Layout<BlockQ5_0, BlockQ5_0x8>{}, k / QK); return;
        case T_Q8_0: fn(Layout<BlockQ8_0, BlockQ8_0x8>{}, k / QK); return;
        case T_MXFP4: fn(Layout<BlockMXFP4, BlockMXFP4x8>{}, k / QK); return;
        default: return;
    }
}

}  // namespace

void repack_rows(int type, const uint8_t* w, size_t w_stride, int first, int count, int k, uint8_t* out) {
    const size_t group = packed_group_bytes(type, k);
    for (int g = first; g < first + count; ++g) {
        const uint8_t* rows = w + static_cast<size_t>(g) * kPackRows * w_stride;
        uint8_t* o = out + g * group;
        with_layout(type, k, [&](auto layout, int nb) {
            using L = decltype(layout);
            pack_group<typename L::In>(rows, w_stride, nb, reinterpret_cast<typename L::Out*>(o));
        });
    }
}

void unpack_row(int type, const uint8_t* packed, int64_t row, int k, uint8_t* out) {
    const uint8_t* group = packed + static_cast<size_t>(row / kPackRows) * packed_group_bytes(type, k);
    const int lane = static_cast<int>(row % kPackRows);
    with_layout(type, k, [&](auto layout, int nb) {
        using L = decltype(layout);
        unpack_lane<typename L::In>(reinterpret_cast<const typename L::Out*>(group), nb, lane, out);
    });
}

namespace {
constexpr size_t kHugePage = size_t{1} << 21;
constexpr size_t kPage = 4096;
size_t mapped_size(size_t bytes) { return (bytes + kPage - 1) / kPage * kPage; }

// Huge pages for the repacked copies only when asked (INFERENCE4PY_GGML_HUGEPAGES=1). Measured on a 2-core
// VM: they decode an 8B Q4_K_M 4-7 % faster, but a host that backs its guest's memory lazily hands out
// never-touched 2 MB pages slowly (loading that 8B took 5.3-6.4 s instead of 2.1 s), which small pages,
// recycled from memory the system just freed, do not cost.
bool huge_pages_asked() {
    const char* value = std::getenv("INFERENCE4PY_GGML_HUGEPAGES");
    return value != nullptr && std::strcmp(value, "1") == 0;
}
}  // namespace

// Anonymous mappings of their own, so freeing a weight (a model unloaded) gives its memory back to the
// system at once; with huge pages asked for, one of 2 MB or more is aligned to a huge page and its whole
// huge pages are asked for as such (the tail stays in small pages: nothing is rounded up beyond 4 KB).
uint8_t* allocate_packed(size_t bytes) {
#if defined(__linux__)
    const size_t size = mapped_size(bytes);
    if (size < kHugePage || !huge_pages_asked()) {
        void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
    }
    void* map = mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<uintptr_t>(map);
    const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > start) munmap(map, aligned - start);
    const uintptr_t end = start + size + kHugePage;
    if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - (aligned + size));
#if defined(MADV_HUGEPAGE)
    madvise(reinterpret_cast<void*>(aligned), size / kHugePage * kHugePage, MADV_HUGEPAGE);  // a hint
#endif
    return reinterpret_cast<uint8_t*>(aligned);
#else
    return static_cast<uint8_t*>(std::malloc(bytes));
#endif
}

void free_packed(uint8_t* p, size_t bytes) {
    if (p == nullptr) return;
#if defined(__linux__)
    munmap(p, mapped_size(bytes));
#else
    (void)bytes;
    std::free(p);
#endif
}

void prefault(const void* p, size_t bytes) {
#if defined(__linux__)
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22  // Linux 5.14; older kernels answer EINVAL and the pages fault one by one
#endif
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const auto start = reinterpret_cast<uintptr_t>(p) / page * page;
    const uintptr_t end = reinterpret_cast<uintptr_t>(p) + bytes;
    madvise(reinterpret_cast<void*>(start), end - start, MADV_POPULATE_READ);
#else
    (void)p;
    (void)bytes;
#endif
}

#if defined(__linux__)
namespace {
// Whether no page of [lo, hi) is the process's own copy: a private mapping's written page (present and
// not a file page, /proc/self/pagemap bits 63 and 61) would be lost by MADV_DONTNEED, the file's bytes
// coming back in its place. Unreadable: false (nothing is released).
bool all_file_pages(uintptr_t lo, uintptr_t hi, uintptr_t page) {
    FILE* pagemap = std::fopen("/proc/self/pagemap", "rb");
    if (pagemap == nullptr) return false;
    bool ok = std::fseek(pagemap, static_cast<long>(lo / page * 8), SEEK_SET) == 0;
    uint64_t entries[512];
    for (uintptr_t at = lo; ok && at < hi;) {
        const size_t want = std::min<size_t>(512, (hi - at) / page);
        ok = std::fread(entries, 8, want, pagemap) == want;
        for (size_t i = 0; ok && i < want; ++i)
            if ((entries[i] >> 63 & 1) && !(entries[i] >> 61 & 1)) ok = false;
        at += want * page;
    }
    std::fclose(pagemap);
    return ok;
}
}  // namespace
#endif

void release_file_pages(const void* p, size_t bytes) {
#if defined(__linux__)
    const auto start = reinterpret_cast<uintptr_t>(p);
    const uintptr_t end = start + bytes;
    // the mapping that holds the range must be a file's (a nonzero inode): then dropping the pages
    // loses nothing, they are the file's bytes; anonymous memory is the only copy and stays
    FILE* maps = std::fopen("/proc/self/maps", "r");
    if (maps == nullptr) return;
    bool file = false;
    char line[512];
    while (std::fgets(line, sizeof(line), maps) != nullptr) {
        unsigned long lo = 0, hi = 0, offset = 0, inode = 0;
        char perms[8] = {0}, dev[16] = {0};
        if (std::sscanf(line, "%lx-%lx %7s %lx %15s %lu", &lo, &hi, perms, &offset, dev, &inode) != 6) continue;
        if (lo <= start && end <= hi) {
            // a file's pages: onnxruntime maps each initializer's external data privately (rw-p) and never
            // writes it, so every page is still the file's
            file = inode != 0;
            break;
        }
    }
    std::fclose(maps);
    if (!file) return;
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t lo = (start + page - 1) / page * page, hi = end / page * page;  // whole pages inside only
    if (hi <= lo || !all_file_pages(lo, hi, page)) return;
    madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
#else
    (void)p;
    (void)bytes;
#endif
}

}  // namespace i4p
