/* Candidate ordering for the sampler (internal to weft_sampler). A candidate is one u64:
 * (descending-order key of its fp32 logit) << 32 | id, so ascending u64 order is exactly SPEC §5.1 step 4
 * (z descending, ties by id ascending). */
#ifndef WEFT_CORE_SAMPLER_ORDER_H
#define WEFT_CORE_SAMPLER_ORDER_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 32-bit key that sorts ascending as z sorts descending. -0.0 maps like +0.0 (the reference compares
 * values, and -0.0 == 0.0 is a tie broken by id). z must not be NaN (the sampler maps NaN to -inf first). */
static inline uint32_t weft_order_key(float z) {
    uint32_t b;
    memcpy(&b, &z, sizeof b);
    b = b == 0x80000000u ? 0u : b; /* -0.0 -> +0.0 */
    /* Ascending with z: negatives flip all bits, positives set the sign bit. Branch-free on purpose: rows
     * mix signs at random, and a branch here mispredicts half the time. */
    uint32_t asc = b ^ ((0u - (b >> 31)) | 0x80000000u);
    return ~asc;
}

/* The fp32 value of an order key (inverse of weft_order_key; -0.0 comes back as +0.0). */
static inline float weft_order_value(uint32_t key) {
    uint32_t asc = ~key;
    uint32_t b = asc ^ ((0u - ((asc >> 31) ^ 1u)) | 0x80000000u); /* inverse of the map above */
    float z;
    memcpy(&z, &b, sizeof z);
    return z;
}

static inline uint64_t weft_order_cand(float z, int32_t id) {
    return ((uint64_t)weft_order_key(z) << 32) | (uint32_t)id;
}

/* Sorts a[0..n) ascending (full u64 order) using tmp[n] as scratch. Requires a[] to be in ascending order of
 * the low 32 bits (ids) on entry: the radix passes sort only the high 32 bits, stably. */
void weft_order_sort(uint64_t *a, uint64_t *tmp, size_t n);

/* Sorts 32-bit keys a[0..n) ascending, tmp[n] scratch (LSD radix, four 8-bit digits). */
void weft_order_sort_u32(uint32_t *a, uint32_t *tmp, size_t n);

/* The k-th smallest (1 <= k <= n) of the distinct values a[0..n), by MSD radix selection; a is not modified,
 * tmp[n] is scratch. O(n) per digit, at most 6 digits, usually 2-3. */
uint64_t weft_order_kth(const uint64_t *a, size_t n, size_t k, uint64_t *tmp);

#endif
