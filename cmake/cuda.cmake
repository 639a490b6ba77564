# The CUDA backend (issue E1), included by CMakeLists.txt when -DWEFT_CUDA=ON.
#
#   weft_cuda_kernels  every .cu in src/backend/cuda (device code, extern "C" launchers)
#   weft_cuda          every .c in src/backend/cuda (host side: weights upload, slots, forward, admission)
#   test_cuda_backend  tests/gpu/test_cuda_backend.c: fixtures + exactness through the backend vtable (GPU only)
#   test_q4f_layout    tests/gpu/test_q4f_layout.c: the Q4F layout's host functions (no GPU needed)
#   bench_cuda_<k>     bench/cuda/<k>.cu: one kernel's CPU reference, correctness and timing (GPU only)
#
# CUDA targets: sm_90a (wgmma/setmaxnreg-capable Hopper code, written with -gencode as HOPPER.md advises) plus
# sm_80, static cudart. Device code never uses fast math and never contracts a*b+c on its own (-fmad=false):
# every fused multiply-add in the kernels is an explicit fmaf, so the arithmetic is what the source says.
#
# -DWEFT_STATIC=ON additionally links jansson, pcre2-8, utf8proc and libcrypto statically into the targets here
# (the GPU machine has none of Debian's libraries).
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)

set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
if(NOT DEFINED WEFT_CUDA_GENCODE)
  set(WEFT_CUDA_GENCODE "-gencode=arch=compute_90a,code=sm_90a;-gencode=arch=compute_80,code=sm_80")
endif()
# Flags for nvcc. The top-level add_compile_options (gcc warnings, sanitizers) are C flags that nvcc does not
# take, so CUDA targets get their own list (their host code still gets the warnings through -Xcompiler).
set(WEFT_CUDA_FLAGS ${WEFT_CUDA_GENCODE} -fmad=false -lineinfo --expt-relaxed-constexpr
    -Xcompiler=-Wall,-Wextra,-fno-strict-aliasing)
if(WEFT_WERROR)
  list(APPEND WEFT_CUDA_FLAGS -Werror=all-warnings)
endif()

file(GLOB WEFT_CUDA_CU CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
file(GLOB WEFT_CUDA_C CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.c)

add_library(weft_cuda_kernels STATIC ${WEFT_CUDA_CU})
set_property(TARGET weft_cuda_kernels PROPERTY COMPILE_OPTIONS "")
set_property(TARGET weft_cuda_kernels PROPERTY CUDA_ARCHITECTURES OFF) # WEFT_CUDA_GENCODE says which
target_compile_options(weft_cuda_kernels PRIVATE ${WEFT_CUDA_FLAGS})
# Whether the build holds sm_90a code (wgmma, setmaxnreg): without it the Hopper-only kernels would only trap,
# so their launchers refuse (cudaErrorNotSupported) and the mma.sync kernels run instead.
if(WEFT_CUDA_GENCODE MATCHES "code=sm_90a")
  target_compile_definitions(weft_cuda_kernels PRIVATE WEFT_CUDA_SM90A=1)
endif()
target_include_directories(weft_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR}/src/backend/cuda)
target_link_libraries(weft_cuda_kernels PUBLIC CUDA::cudart_static)

add_library(weft_cuda STATIC ${WEFT_CUDA_C})
target_link_libraries(weft_cuda PUBLIC weft_cuda_kernels weft_kernels weft_format weft_sampler weft_util
                      CUDA::cudart_static)
# CUDA's headers are third-party code: keep our -Werror away from them.
target_include_directories(weft_cuda SYSTEM PUBLIC ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(weft_cuda PUBLIC WEFT_HAVE_CUDA=1)

if(WEFT_STATIC)
  # Static dependency libraries: point the imported targets at the .a files.
  foreach(pair "JANSSON;jansson" "PCRE2;pcre2-8" "UTF8PROC;utf8proc" "MHD;microhttpd")
    list(GET pair 0 var)
    list(GET pair 1 lib)
    find_library(WEFT_STATIC_${var} NAMES lib${lib}.a REQUIRED)
    set_target_properties(PkgConfig::${var} PROPERTIES INTERFACE_LINK_LIBRARIES "${WEFT_STATIC_${var}}")
  endforeach()
  find_library(WEFT_STATIC_CRYPTO NAMES libcrypto.a REQUIRED)
  set_target_properties(OpenSSL::Crypto PROPERTIES IMPORTED_LOCATION "${WEFT_STATIC_CRYPTO}"
                        INTERFACE_LINK_LIBRARIES "Threads::Threads;${CMAKE_DL_LIBS}")
  # microhttpd's static library needs gnutls unless built without it; Debian's is built with it.
  find_library(WEFT_STATIC_GNUTLS NAMES gnutls)
  if(WEFT_STATIC_GNUTLS)
    set_property(TARGET PkgConfig::MHD APPEND PROPERTY INTERFACE_LINK_LIBRARIES "${WEFT_STATIC_GNUTLS}")
  endif()
  set(WEFT_CUDA_STATIC_LINK -static-libgcc -static-libstdc++)
endif()

# The GPU test: built here, run on the GPU machine by tests/gpu/run.sh (no ctest registration: CI has no GPU).
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_backend.c)
  add_executable(test_cuda_backend ${CMAKE_SOURCE_DIR}/tests/gpu/test_cuda_backend.c)
  target_include_directories(test_cuda_backend PRIVATE ${CMAKE_SOURCE_DIR}/tests/unit)
  target_link_libraries(test_cuda_backend PRIVATE weft_cuda weft_kernels weft_format weft_sampler weft_util
                        PkgConfig::JANSSON)
  target_link_options(test_cuda_backend PRIVATE ${WEFT_CUDA_STATIC_LINK})
  set_target_properties(test_cuda_backend PROPERTIES LINKER_LANGUAGE CUDA)
endif()

# The Q4F layout's host functions (no GPU needed: run by .ci/run after the CUDA build).
if(EXISTS ${CMAKE_SOURCE_DIR}/tests/gpu/test_q4f_layout.c)
  add_executable(test_q4f_layout ${CMAKE_SOURCE_DIR}/tests/gpu/test_q4f_layout.c)
  target_include_directories(test_q4f_layout PRIVATE ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(test_q4f_layout PRIVATE weft_cuda_kernels CUDA::cudart_static)
  target_link_options(test_q4f_layout PRIVATE ${WEFT_CUDA_STATIC_LINK})
  set_target_properties(test_q4f_layout PROPERTIES LINKER_LANGUAGE CUDA)
endif()

# Kernel harnesses (llm.c dev/cuda style): each has a CPU reference, a correctness check and a timing loop.
file(GLOB WEFT_CUDA_BENCH CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/bench/cuda/*.cu)
foreach(src ${WEFT_CUDA_BENCH})
  get_filename_component(k ${src} NAME_WE)
  add_executable(bench_cuda_${k} ${src})
  set_property(TARGET bench_cuda_${k} PROPERTY COMPILE_OPTIONS "")
  set_property(TARGET bench_cuda_${k} PROPERTY CUDA_ARCHITECTURES OFF)
  target_compile_options(bench_cuda_${k} PRIVATE ${WEFT_CUDA_FLAGS})
  target_include_directories(bench_cuda_${k} PRIVATE ${CMAKE_SOURCE_DIR}/bench/cuda)
  target_link_libraries(bench_cuda_${k} PRIVATE weft_cuda_kernels CUDA::cudart_static)
  target_link_options(bench_cuda_${k} PRIVATE ${WEFT_CUDA_STATIC_LINK})
endforeach()

# The backend end to end at real shapes on random in-memory weights (bench/NOTES.md has the results).
add_executable(bench_cuda_model ${CMAKE_SOURCE_DIR}/bench/cuda/model_bench.c)
target_link_libraries(bench_cuda_model PRIVATE weft_cuda weft_format weft_sampler weft_util PkgConfig::JANSSON
                      Threads::Threads)
target_link_options(bench_cuda_model PRIVATE ${WEFT_CUDA_STATIC_LINK})

# The model layer picks the backend (src/model/model.c: `--backend cuda|auto`), so it links the CUDA backend and
# sees WEFT_HAVE_CUDA (a PUBLIC definition of weft_cuda) when this file is included.
target_link_libraries(weft_model PUBLIC weft_cuda)
