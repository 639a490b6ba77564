/* Status names, error records, half-precision conversions, clock. */
#include "weft/common.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

weft_status weft_err_set(weft_err *err, weft_status code, const char *fmt, ...) {
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        err->code = code;
    }
    return code;
}

const char *weft_status_name(weft_status s) {
    switch (s) {
    case WEFT_OK:
        return "ok";
    case WEFT_EINVAL:
        return "invalid";
    case WEFT_EIO:
        return "io";
    case WEFT_EFORMAT:
        return "format";
    case WEFT_ENOTSUP:
        return "not supported";
    case WEFT_ENOMEM:
        return "out of memory";
    case WEFT_ERANGE:
        return "out of range";
    case WEFT_ECANCELLED:
        return "cancelled";
    case WEFT_EBUSY:
        return "busy";
    case WEFT_EINTERNAL:
        return "internal";
    }
    return "unknown";
}

static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

float weft_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0) {
        /* zero or subnormal: man * 2^-24, exact in fp32 */
        float v = (float)man * 5.9604644775390625e-08f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t weft_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to inf */
    if (ax < 0x38800000u) {                                  /* subnormal half */
        float v = bits_f32(ax) * 16777216.0f;                /* scale by 2^24, exact */
        /* round half to even via nearbyint semantics of float->int conversion */
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    uint32_t exp = ((ax >> 23) - 112) << 10, man = (ax >> 13) & 0x3ff;
    uint32_t r = exp | man, low = ax & 0x1fff;
    if (low > 0x1000 || (low == 0x1000 && (r & 1))) r++;
    return (uint16_t)(sign | r);
}

float weft_bf16_to_f32(uint16_t b) {
    return bits_f32((uint32_t)b << 16);
}

uint16_t weft_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

double weft_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

weft_status weft_read_file(const char *path, char **buf, size_t *len, weft_err *err) {
    *buf = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return weft_err_set(err, WEFT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) { /* fopen succeeds on a directory */
        fclose(f);
        return weft_err_set(err, WEFT_EIO, "%s: is a directory", path);
    }
    char *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 4096) { /* room for a read and the final NUL */
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(b, cap + 1);
            if (!nb) {
                free(b);
                fclose(f);
                return weft_err_set(err, WEFT_ENOMEM, "%s: out of memory reading", path);
            }
            b = nb;
        }
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    const bool bad = ferror(f);
    fclose(f);
    if (bad) {
        free(b);
        return weft_err_set(err, WEFT_EIO, "%s: read error", path);
    }
    b[n] = 0;
    *buf = b;
    if (len) *len = n;
    return WEFT_OK;
}
