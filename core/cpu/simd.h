#pragma once
// KILN_SIMD_CLONES: a dense loop built for AVX-512, AVX2+FMA and baseline x86-64, chosen at load
// time (GCC's target_clones). kiln is built for baseline x86-64, whose SSE2 reaches about a third
// of what exp at memory speed, compile's fused blocks (which sit in L1) or the fused optimizer
// updates need. Not under sanitizers: the ifunc resolver runs while the program is relocated,
// before the sanitizer runtime starts, and an instrumented resolver crashes there. clang (the
// fuzz build) does not multiversion templates; it gets the baseline loops.
#if defined(__x86_64__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define KILN_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KILN_SIMD_CLONES
#endif
