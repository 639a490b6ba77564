/* SPEC §5.2 keyed-draw primitives (splitmix64 keys, uniforms, Gumbel noise) and §5.3/§5.4 SHA-256 derived
 * values (prompt seeds, token_sha). Reference: ../shared/tools/sampler_reference.py (mix, key, uniform,
 * gumbel, seed_from_prompt, token_sha). */
#include "weft/sampler.h"

#include <math.h>
#include <string.h>

#include <openssl/evp.h>

uint64_t weft_mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    x ^= x >> 31;
    return x;
}

uint64_t weft_key(uint64_t seed, int64_t pos, int32_t id) {
    /* Conversions of negative values to uint64_t are modular (C17 6.3.1.3), matching the reference's
     * "& (2^64 - 1)". Unsigned multiplication wraps. */
    uint64_t x = weft_mix(seed + 0x9E3779B97F4A7C15ULL);
    x = weft_mix(x ^ ((uint64_t)pos * 0xD1B54A32D192ED03ULL));
    return weft_mix(x ^ (uint64_t)(int64_t)id);
}

double weft_uniform(uint64_t key) {
    /* key >> 12 < 2^52, so the conversion, the + 0.5 and the power-of-two scaling are all exact. */
    return ((double)(key >> 12) + 0.5) * 0x1p-52;
}

double weft_gumbel(double u) {
    return -log(-log(u));
}

/* Decimal text of v into buf (at most 11 chars), returns the length. Same text as Python str(int). */
static size_t put_int(char *buf, int32_t v) {
    char tmp[12];
    size_t n = 0, len = 0;
    /* Work on the magnitude as u32 so INT32_MIN is fine. */
    uint32_t m = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
    do {
        tmp[n++] = (char)('0' + m % 10u);
        m /= 10u;
    } while (m);
    if (v < 0) buf[len++] = '-';
    while (n) buf[len++] = tmp[--n];
    return len;
}

/* SHA-256 of the ids in decimal joined by ",", then the text tail1 and tail2 (either may be NULL). */
static weft_status sha_ids(const int32_t *ids, size_t n, const char *tail1, const char *tail2,
                           uint8_t out[32], weft_err *err) {
    if (n > 0 && !ids)
        return weft_err_set(err, WEFT_EINVAL, "sha256 of token ids: ids is NULL with n = %zu", n);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    if (!ctx) return weft_err_set(err, WEFT_ENOMEM, "sha256 of token ids: EVP_MD_CTX_new failed");
    weft_status st = WEFT_OK;
    if (EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
        st = weft_err_set(err, WEFT_EINTERNAL, "sha256 of token ids: EVP_DigestInit_ex(sha256) failed");
        goto done;
    }
    /* Stream the text through a stack buffer: prompts can be long and this must not allocate per id. */
    char buf[4096];
    size_t used = 0;
    int ok = 1;
    for (size_t i = 0; ok && i < n; i++) {
        if (used + 13 > sizeof buf) {
            ok = EVP_DigestUpdate(ctx, buf, used) == 1;
            used = 0;
        }
        if (i) buf[used++] = ',';
        used += put_int(buf + used, ids[i]);
    }
    if (ok && used) ok = EVP_DigestUpdate(ctx, buf, used) == 1;
    if (ok && tail1 && *tail1) ok = EVP_DigestUpdate(ctx, tail1, strlen(tail1)) == 1;
    if (ok && tail2 && *tail2) ok = EVP_DigestUpdate(ctx, tail2, strlen(tail2)) == 1;
    if (!ok) {
        st = weft_err_set(err, WEFT_EINTERNAL, "sha256 of token ids: EVP_DigestUpdate failed");
        goto done;
    }
    unsigned int md_len = 0;
    if (EVP_DigestFinal_ex(ctx, out, &md_len) != 1 || md_len != 32)
        st = weft_err_set(err, WEFT_EINTERNAL, "sha256 of token ids: EVP_DigestFinal_ex failed");
done:
    EVP_MD_CTX_free(ctx);
    return st;
}

weft_status weft_sha256_ids(const int32_t *ids, size_t n, const char *suffix, uint8_t out[32],
                            weft_err *err) {
    return sha_ids(ids, n, suffix, NULL, out, err);
}

uint64_t weft_seed_from_prompt(const int32_t *ids, size_t n, const char *salt) {
    /* SPEC §5.3: SHA-256 of (ids joined by ",") + "|" + salt; first 8 bytes little endian, 63 bits. */
    uint8_t md[32];
    if (sha_ids(ids, n, "|", salt ? salt : "0", md, NULL) != WEFT_OK) return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | md[i];
    return v & 0x7FFFFFFFFFFFFFFFULL;
}

void weft_token_sha(const int32_t *ids, size_t n, char out[13]) {
    static const char hex[] = "0123456789abcdef";
    uint8_t md[32];
    if (sha_ids(ids, n, NULL, NULL, md, NULL) != WEFT_OK) {
        out[0] = '\0';
        return;
    }
    for (int i = 0; i < 6; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[12] = '\0';
}
