# CPU kernels (src/backend/cpu): bitwise against the canonical arithmetic of mm.h on every ISA.
weft_add_test(test_cpu_kernels SOURCES test_cpu_kernels.c LIBS weft_kernels weft_format)
weft_add_test(test_cpu_attention SOURCES test_cpu_attention.c LIBS weft_kernels weft_format m)

# The kernel harness (bench/cpu/bench_kernels.c): not a test, built on request.
add_executable(bench_cpu_kernels EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/cpu/bench_kernels.c)
target_link_libraries(bench_cpu_kernels PRIVATE weft_kernels weft_format weft_util m)

# The proposed int8-limb definition of the CUDA 4-bit arithmetic (src/backend/cuda/i8limb.h) on the CPU.
weft_add_test(test_i8limb SOURCES test_i8limb.c LIBS m)
# The K-block walks of the CUDA 4-bit matmuls (src/backend/cuda/slot_walk.h) against their definition.
weft_add_test(test_slot_walk SOURCES test_slot_walk.c)
