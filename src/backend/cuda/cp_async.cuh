// Asynchronous global -> shared copies (cp.async, sm_80+), shared by the kernels that stage data in shared
// memory without passing it through registers.
#ifndef WEFT_CP_ASYNC_CUH
#define WEFT_CP_ASYNC_CUH

#include <stdint.h>

__device__ __forceinline__ uint32_t smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}

// cp_async<16> to a shared-memory address (smem_addr's form), for kernels that keep their addresses as
// 32-bit offsets.
__device__ __forceinline__ void cp_async16_s(uint32_t dst, const void *src, bool ok) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(ok ? 16 : 0)
                 : "memory");
}

// Copies BYTES (4, 8 or 16; dst and src aligned to it) from global to shared memory asynchronously; with ok
// false, writes zeros instead (src is not read). cp_async_s: dst as a shared-memory address (smem_addr).
template <int BYTES> __device__ __forceinline__ void cp_async_s(uint32_t dst, const void *src, bool ok) {
    if constexpr (BYTES == 16) {
        cp_async16_s(dst, src, ok);
    } else {
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(dst), "l"(src), "n"(BYTES),
                     "r"(ok ? BYTES : 0)
                     : "memory");
    }
}
template <int BYTES> __device__ __forceinline__ void cp_async(void *dst, const void *src, bool ok) {
    cp_async_s<BYTES>(smem_addr(dst), src, ok);
}
__device__ __forceinline__ void cp_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's committed groups are still in flight.
template <int N> __device__ __forceinline__ void cp_wait() {
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Asks for BYTES (a multiple of 16, src 16-byte aligned) of global memory to be brought into L2 without
// holding a register or a shared-memory byte: one bulk prefetch on sm_90, a line prefetch per 128 bytes
// before. A hint only; the data is read later by ordinary loads, so results never depend on it.
__device__ __forceinline__ void prefetch_l2(const void *src, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(src), "r"(bytes) : "memory");
#else
    for (uint32_t o = 0; o < bytes; o += 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(static_cast<const char *>(src) + o));
#endif
}

#endif
