// Programmatic dependent launch (Hopper, CUDA >= 12.3; kept in captured graphs): a kernel launched with
// weft_pdl_launch may be scheduled while its predecessor in the stream is still finishing; it waits in
// weft_pdl_enter until that predecessor has completed and its writes are visible, so nothing it reads can be
// stale. Every kernel launched this way calls weft_pdl_enter before any store and before any load of data a
// kernel may write, and only then allows its own successor to be scheduled — so at most two kernels overlap,
// and the chain of waits orders each kernel after all earlier ones (kernel N starts only after N − 1 passed
// its wait, so N − 2 has finished). A kernel whose blocks may leave before weft_pdl_enter needs at least one
// block of every launch to reach it (or to call it before leaving): a launch none of whose blocks waits could
// complete before its predecessor, and its successor would then be ordered after neither. The saving is the
// gap between dependent kernels (launch, ramp-up), which at batch 1 is paid ~330 times per token. Values are
// unchanged: the same kernels run on the same inputs. WEFT_CUDA_NO_PDL (non-empty) launches normally (for
// comparison).
#ifndef WEFT_PDL_CUH
#define WEFT_PDL_CUH

#include <cuda_runtime.h>
#include <stdlib.h>
#include <utility>

static __device__ __forceinline__ void weft_pdl_enter() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Loads of data no kernel ever writes (the weights and norm weights, uploaded once by synchronous copies
// before any forward) may be issued before weft_pdl_enter: they then travel while the predecessor finishes,
// which is most of a small matmul's time at batch 1 (one DRAM round trip per kernel otherwise sits between
// every pair of kernels). Nothing is stored before weft_pdl_enter.

// An attribute of the current device, 0 when it cannot be read (the error is cleared).
static inline int weft_device_attr(cudaDeviceAttr a) {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, a, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return v;
}

// Prepares `kernel` for a launch with smem bytes of dynamic shared memory: past the default 48 KiB, the
// kernel's limit is raised to the current device's maximum — never lowered, since launches of other shapes
// share the kernel and may sit in cached graphs, and a process may drive more than one device. Needs a kernel
// without static shared memory (dynamic + static may not exceed the maximum). cudaErrorNotSupported when smem
// exceeds the device's maximum (the caller takes another kernel), else the attribute call's error.
template <typename Kernel> static cudaError_t weft_smem_opt_in(Kernel kernel, size_t smem) {
    const int max_smem = weft_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin);
    if (max_smem <= 0 || smem > (size_t)max_smem) return cudaErrorNotSupported;
    if (smem <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem);
}

// Whether launches use PDL: Hopper or newer (the current device at the first launch) and WEFT_CUDA_NO_PDL
// unset; decided once per process (a constant after that).
static inline bool weft_pdl_on() {
    static const bool on = [] {
        const char *e = getenv("WEFT_CUDA_NO_PDL");
        return !(e && *e) && weft_device_attr(cudaDevAttrComputeCapabilityMajor) >= 9;
    }();
    return on;
}

// Whether the device runs thread block clusters (compute capability 9.0+); decided once per process.
static inline bool weft_cluster_on() {
    static const bool on = weft_device_attr(cudaDevAttrComputeCapabilityMajor) >= 9;
    return on;
}

// Whether the device runs the sm_90a code (wgmma): compute capability exactly 9.0; decided once per process.
static inline bool weft_wgmma_on() {
    static const bool on = weft_device_attr(cudaDevAttrComputeCapabilityMajor) == 9 &&
                           weft_device_attr(cudaDevAttrComputeCapabilityMinor) == 0;
    return on;
}

// The current device's SM count (0 if it cannot be read); decided once per process.
static inline int weft_sm_count() {
    static const int n = weft_device_attr(cudaDevAttrMultiProcessorCount);
    return n;
}

// weft_pdl_launch with thread block clusters of cluster_x blocks along x (grid.x a multiple of it; 0: none;
// only where weft_cluster_on()).
template <typename... KArgs, typename... Args>
static cudaError_t weft_pdl_launch_cluster(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                           cudaStream_t stream, int cluster_x, Args &&...args) {
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = weft_pdl_on() ? 1 : 0;
    attr[1].id = cudaLaunchAttributeClusterDimension;
    attr[1].val.clusterDim.x = (unsigned)cluster_x;
    attr[1].val.clusterDim.y = 1;
    attr[1].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = cluster_x > 0 ? 2 : 1;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... KArgs, typename... Args>
static cudaError_t weft_pdl_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                   cudaStream_t stream, Args &&...args) {
    return weft_pdl_launch_cluster(kernel, grid, block, smem, stream, 0, std::forward<Args>(args)...);
}

#endif
