// The RoPE rotation of one pair, shared by the RoPE + KV store kernel (ops.cu) and the fused decode attention
// (attention_decode.cu), so both rotate q and k to the same bits.
#ifndef WEFT_ROPE_CUH
#define WEFT_ROPE_CUH

#include "cuda_kernels.h"

// The pair's two dimensions for pair i (i < rope.rot / 2): (2i, 2i + 1) when rope.adjacent, else
// (i, i + rot/2) (families-and-formats.md, RoPE).
__device__ __forceinline__ void weft_rope_dims(const weft_cu_rope &rope, int i, int &a, int &b) {
    a = rope.adjacent ? 2 * i : i;
    b = rope.adjacent ? 2 * i + 1 : i + rope.rot / 2;
}

// (x0, x1) rotated by the angle pos·f (f = inv_freq[i]), cos and sin scaled by attn_factor:
// y0 = x0·c − x1·s, y1 = x1·c + x0·s (each product rounded, no contraction: -fmad=false).
__device__ __forceinline__ void weft_rope_rotate(int pos, float f, float attn_factor, float x0, float x1,
                                                 float &y0, float &y1) {
    const float ang = (float)pos * f;
    const float c = cosf(ang) * attn_factor, s = sinf(ang) * attn_factor;
    y0 = x0 * c - x1 * s;
    y1 = x1 * c + x0 * s;
}

#endif
