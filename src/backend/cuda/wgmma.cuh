// wgmma helpers (sm_90a) shared by the wgmma GEMM (gemm_q4w.cu) and its probe (bench/cuda/wgmma_probe.cu).
// PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate": a warpgroup (4 consecutive warps)
// issues wgmma.mma_async; with A in registers each warp supplies rows 16w .. 16w + 15 in mma.sync m16n8k16's
// A fragment layout, and thread (g, t) of warp w holds accumulators d[4b .. 4b + 3] = rows 16w + g, 16w + g +
// 8 x columns 8b + 2t, 8b + 2t + 1 (mma.sync's C layout per 8-column block b).
#ifndef WEFT_WGMMA_CUH
#define WEFT_WGMMA_CUH

#include <stdint.h>

// Shared-memory descriptor (of the shared address saddr) of a K-major operand without swizzle: core matrices
// of 8 rows x 16 bytes; lbo = the byte offset between the two k halves of a 16-k step, sbo = between
// successive groups of 8 rows (columns of B). Bits: [0, 14) address >> 4, [16, 30) lbo >> 4, [32, 46) sbo >>
// 4, layout bits 0 (no swizzle).
__device__ __forceinline__ __attribute__((unused)) uint64_t wgmma_desc_at(uint32_t saddr, uint32_t lbo,
                                                                          uint32_t sbo) {
    return ((uint64_t)(saddr >> 4) & 0x3fff) | ((uint64_t)((lbo >> 4) & 0x3fff) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3fff) << 32);
}
// The same from a generic pointer into shared memory.
__device__ __forceinline__ __attribute__((unused)) uint64_t wgmma_desc(const void *p, uint32_t lbo,
                                                                       uint32_t sbo) {
    return wgmma_desc_at((uint32_t)__cvta_generic_to_shared(p), lbo, sbo);
}

// The descriptor d moved `bytes` (a multiple of 16) further into shared memory: only its address field
// changes, and it cannot carry out of its 14 bits — shared addresses stay below 2^18, so (a >> 4) + (bytes >>
// 4) = (a + bytes) >> 4 < 2^14. One 32-bit addition where building each descriptor from its address takes
// five uniform-datapath instructions (session 27: ≈ 15% of the f16 GEMM consumers' instructions).
__device__ __forceinline__ __attribute__((unused)) uint64_t wgmma_desc_add(uint64_t d, uint32_t bytes) {
    return (d & 0xffffffff00000000ull) | (uint32_t)((uint32_t)d + (bytes >> 4));
}

// An empty asm that reads and writes x: orders a register against the wgmma fences (CUTLASS's
// warpgroup_fence_operand) so the compiler cannot move its writes past wgmma.fence or its reads before
// wgmma.wait_group.
__device__ __forceinline__ __attribute__((unused)) void wgmma_pin(float &x) {
    asm volatile("" : "+f"(x)::"memory");
}
__device__ __forceinline__ __attribute__((unused)) void wgmma_pin(uint32_t &x) {
    asm volatile("" : "+r"(x)::"memory");
}

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
// d[64 x 128] += A (registers: a0..a3, this warp's 16 rows, mma.sync's A fragment) · B (descriptor, 16 x
// 128), fp32 accumulators, bf16 inputs (the hi/lo GEMM's step). scale_d = 1: d is an input (d += A·B); 0: d =
// A·B (the GEMM's first step of a scale group; equal to A·B + (+0.0) up to the sign of a zero sum:
// gemm_q4w.cu's header).
#define WEFT_WGMMA_N128(T)                                                                                   \
    "{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"                                                             \
    "wgmma.mma_async.sync.aligned.m64n128k16.f32." T "." T " "                                               \
    "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,"        \
    "%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,"           \
    "%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1, "        \
    "0;\n}"
#define WEFT_WGMMA_D64                                                                                       \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),          \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]),             \
        "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]),           \
        "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]),           \
        "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),           \
        "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]),           \
        "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),           \
        "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),           \
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2,
                                                 uint32_t a3, uint64_t desc, int scale_d = 1) {
    asm volatile(WEFT_WGMMA_N128("bf16")
                 : WEFT_WGMMA_D64
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d)
                 : "memory");
}
#undef WEFT_WGMMA_N128
#undef WEFT_WGMMA_D64

// d[64 x 64] += A · B (16 x 64) with f16 inputs, 32 accumulators per thread (columns 8b + 2t, +1 of blocks
// b = 0..7). The f16-activation GEMM's step (gemm_q4w.cu: the 64-row tiles' step, and each half of the
// 128-row tiles').
__device__ __forceinline__ void wgmma_m64n64k16_f16(float (&d)[32], uint32_t a0, uint32_t a1, uint32_t a2,
                                                    uint32_t a3, uint64_t desc, int scale_d = 1) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,"
                 "%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1, 0;\n}"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
                   "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
                   "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
                   "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(scale_d)
                 : "memory");
}

// The 16 accumulators of an m64n32k16 as asm operands.
#define WEFT_WGMMA_D16                                                                                       \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),          \
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
// d[64 x 32] += A · B (16 x 32) with f16 inputs, A and B from shared memory (K-major descriptors,
// wgmma_desc_at), 16 accumulators per thread (columns 8b + 2t, +1 of blocks b = 0..3): the f16 attention's
// scores of a key block (attn_wgmma.cuh).
__device__ __forceinline__ void wgmma_m64n32k16_f16_ss(float (&d)[16], uint64_t adesc, uint64_t bdesc) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}"
                 : WEFT_WGMMA_D16
                 : "l"(adesc), "l"(bdesc), "r"(1)
                 : "memory");
}

// d[64 x 32] += A (registers) · B (16 x 32) with f16 inputs, B MN-major: core matrices of 8 k rows x 16 bytes
// of 8 columns, sbo between column blocks, lbo between the k halves (PTX ISA, "Canonical Layouts":
// ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)); imm-trans-b = 1) — a quarter of the f16 attention's P·V, B the V rows
// as the cache holds them (attn_wgmma.cuh).
__device__ __forceinline__ void wgmma_m64n32k16_f16_tb(float (&d)[16], uint32_t a0, uint32_t a1, uint32_t a2,
                                                       uint32_t a3, uint64_t desc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, 1;\n}"
        : WEFT_WGMMA_D16
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc), "r"(1)
        : "memory");
}

#undef WEFT_WGMMA_D16

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N of this warpgroup's committed groups are still in flight.
template <int N> __device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void wgmma_commit_wait0() {
    wgmma_commit();
    wgmma_wait<0>();
}
#endif

#endif
