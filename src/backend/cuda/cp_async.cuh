// Asynchronous global -> shared copies (cp.async, sm_80+; cp.async.bulk on mbarriers, sm_90) and named
// barriers, shared by the kernels that stage data in shared memory without passing it through registers.
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

// mbarriers and bulk copies (sm_90: cp.async.bulk, the copy engine; no-ops on earlier targets, whose
// launchers never take the kernels that use them). mbar_init: an mbarrier in shared memory expecting `count`
// arrivals per phase; mbar_init_fence makes the inits visible to the other threads and to the copy engine
// (before a block barrier).
__device__ __forceinline__ __attribute__((unused)) void mbar_init(unsigned long long *mb, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(mb)), "r"(count) : "memory");
#endif
}
__device__ __forceinline__ __attribute__((unused)) void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// One arrival on mb that also announces `bytes` transaction bytes: the phase completes when its arrivals
// are in and that many bytes of bulk copies have landed.
__device__ __forceinline__ __attribute__((unused)) void mbar_expect_tx(unsigned long long *mb,
                                                                       uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(mb)), "r"(bytes)
                 : "memory");
#endif
}
// A bulk copy of `bytes` (a multiple of 16, both addresses 16-byte aligned) from global src to shared dst,
// completing as transaction bytes on mb (announced there by mbar_expect_tx).
__device__ __forceinline__ __attribute__((unused)) void
bulk_copy_g2s(uint32_t dst, const void *src, uint32_t bytes, unsigned long long *mb) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile(
        "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
        "l"(src), "r"(bytes), "r"(smem_addr(mb))
        : "memory");
#endif
}
// One bulk copy announced and issued by the same thread (mbar_expect_tx, then bulk_copy_g2s).
__device__ __forceinline__ __attribute__((unused)) void bulk_g2s(uint32_t dst, const void *src,
                                                                 uint32_t bytes, unsigned long long *mb) {
    mbar_expect_tx(mb, bytes);
    bulk_copy_g2s(dst, src, bytes, mb);
}
// Waits until phase `parity` (0 or 1) of mb has completed.
__device__ __forceinline__ __attribute__((unused)) void mbar_wait(unsigned long long *mb, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t m = smem_addr(mb);
    uint32_t done = 0;
    while (!done)
        asm volatile(
            "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, "
            "0, p;\n}"
            : "=r"(done)
            : "r"(m), "r"(parity)
            : "memory");
#endif
}

// Named barrier `id` (1..15; 0 is __syncthreads') for n threads (a multiple of 32): bar_sync waits,
// bar_arrive counts this warp without waiting.
__device__ __forceinline__ __attribute__((unused)) void bar_sync(int id, int n) {
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ __attribute__((unused)) void bar_arrive(int id, int n) {
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}

#endif
