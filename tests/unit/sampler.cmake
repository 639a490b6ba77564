# Sampler (SPEC §5): reference vectors, hand-computed unit tests, fast path == full-sort definition (+ timing).
weft_add_test(test_sampler_vectors SOURCES test_sampler_vectors.c test_sampler_naive.c
              LIBS weft_sampler PkgConfig::JANSSON m)
weft_add_test(test_sampler_unit SOURCES test_sampler_unit.c test_sampler_naive.c LIBS weft_sampler m)
weft_add_test(test_sampler_fast SOURCES test_sampler_fast.c test_sampler_naive.c LIBS weft_sampler m Threads::Threads)
