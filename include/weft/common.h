/* weft/common.h — status codes, the error record every fallible call fills, small shared helpers.
 *
 * Convention: a fallible function returns a weft_status (0 = WEFT_OK) and, on failure, writes one
 * human-readable line into a caller-owned weft_err naming what is wrong (the file, field, tensor, request
 * field...). Nothing a request or a file can trigger calls exit() or abort(). */
#ifndef WEFT_COMMON_H
#define WEFT_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum weft_status {
    WEFT_OK = 0,
    WEFT_EINVAL = 1,  /* bad argument or malformed input (request field, CLI option) */
    WEFT_EIO = 2,     /* open/read/mmap failed */
    WEFT_EFORMAT = 3, /* a file is corrupt or not what it claims (header, offsets, sizes, keys) */
    WEFT_ENOTSUP = 4, /* valid input that this build cannot run (unknown GGUF type, quant mode...) */
    WEFT_ENOMEM = 5,  /* allocation failed or a load would not fit (message states the numbers) */
    WEFT_ERANGE = 6,  /* a value out of range (token id past vocab, context exceeded) */
    WEFT_ECANCELLED = 7,
    WEFT_EBUSY = 8,
    WEFT_EINTERNAL = 9,
} weft_status;

/* One error message, caller-owned. code mirrors the returned status. */
typedef struct weft_err {
    weft_status code;
    char msg[512];
} weft_err;

/* Sets err (when non-NULL) and returns code. printf-style. */
weft_status weft_err_set(weft_err *err, weft_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Short stable name of a status ("invalid", "format", "not supported", ...). */
const char *weft_status_name(weft_status s);

/* IEEE binary16 and bfloat16 <-> float, exact (round-to-nearest-even on the way down). */
float weft_f16_to_f32(uint16_t h);
uint16_t weft_f32_to_f16(float f);
float weft_bf16_to_f32(uint16_t b);
uint16_t weft_f32_to_bf16(float f);

/* Monotonic clock in seconds. */
double weft_now(void);

/* Reads the whole file at path into a NUL-terminated heap buffer: *buf (the caller frees it) and, when len is
 * non-NULL, *len = bytes before the NUL. Reads to end of file, so pipes and /proc files work. Errors (*buf
 * NULL): WEFT_EIO "PATH: cannot open: REASON" or "PATH: read error", WEFT_ENOMEM "PATH: out of memory
 * reading". */
weft_status weft_read_file(const char *path, char **buf, size_t *len, weft_err *err);

#ifdef __cplusplus
}
#endif
#endif
