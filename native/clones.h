/* FF_CLONES: a kernel built for AVX-512, AVX2 and the x86-64 baseline, the best this CPU runs
 * picked when the library loads (GCC's target_clones). Each clone runs the same operations in
 * the same order (the kernels are built with -ffp-contract=off: no fused multiply-adds, no
 * reassociation), only in wider vectors, so all three give the same bits. Why: the wheels are
 * built for the baseline (4 floats a vector); the element-wise loops of batch norm ran 3-4x
 * faster in AVX-512's 16. FF_NO_CLONES builds the baseline alone (tests/ops/test_clones.py
 * compares its bits with the clones'). */
#ifndef FF_CLONES_H
#define FF_CLONES_H

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(FF_NO_CLONES)
#define FF_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define FF_CLONES
#endif

#endif
