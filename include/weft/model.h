/* weft/model.h — a loaded model: config, weights (as stored), tokenizer and chat template, from a checkpoint
 * directory (safetensors / MLX), a .gguf file, or a GGUF image in memory (the embedded stories260K). */
#ifndef WEFT_MODEL_H
#define WEFT_MODEL_H

#include "weft/backend.h"
#include "weft/config.h"
#include "weft/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct weft_tokenizer weft_tokenizer;
typedef struct weft_gguf weft_gguf;

typedef enum weft_format { WEFT_FORMAT_SAFETENSORS, WEFT_FORMAT_MLX, WEFT_FORMAT_GGUF } weft_format;

typedef struct weft_model {
    char *path; /* as given ("<embedded stories260K>" for the built-in model) */
    char *id;   /* default served id: the last path component, without .gguf */
    weft_format format;
    weft_config cfg;
    weft_tensor_set *tensors;  /* canonical HF names */
    weft_gguf *gguf;           /* open GGUF handle (metadata) or NULL */
    weft_tokenizer *tokenizer; /* NULL when the checkpoint has none (token-id prompts only) */
    char *chat_template;       /* Jinja source or NULL */
    char *bos_text, *eos_text; /* special token strings for templates, or NULL */
    size_t weights_bytes;      /* bytes of stored weights */
    char quant[64];            /* "F32", "Q4_0", "mlx affine 4-bit g64", "BF16", "mixed (Q4_K, Q6_K)" */
    char *mtp_path;            /* the separate file the MTP head came from (GGUF mtp-*.gguf), or NULL */
} weft_model;

/* Loads path (directory or .gguf). The weights bytes are checked against available memory before any weight
 * is read (WEFT_ENOMEM with both numbers). Errors name the path and the reason: WEFT_EIO (missing,
 * unreadable), WEFT_EFORMAT (corrupt file, missing config key or tensor), WEFT_ENOTSUP (family/format/option
 * this build cannot run). */
weft_status weft_model_load(const char *path, weft_model **out, weft_err *err);

/* Loads a GGUF image held in memory (borrowed: must outlive the model). name is used as path and id. */
weft_status weft_model_load_gguf_memory(const char *name, const void *data, size_t len, weft_model **out,
                                        weft_err *err);

void weft_model_free(weft_model *m);

typedef struct weft_backend_opts {
    const char *kind; /* "cpu", "cuda" or "auto" (NULL: "auto"; without a GPU build or device, the CPU) */
    int threads;      /* CPU threads (0 = all cores) */
    int max_slots;    /* streams open at once; 0 = auto: as many streams at max_context as fit (1..64) */
    int max_rows;     /* row budget of a forward */
    int max_context;  /* positions per stream; 0 = the model's context, lowered to what fits one stream */
    const char *activations; /* "fp32" (NULL: the default) or "f16": the CUDA backend's 4-bit products and
                                attention on f16-rounded operands (weft_cuda_backend_opts.act_f16); the CPU
                                backend refuses "f16" (WEFT_ENOTSUP), any other value is WEFT_EINVAL */
    int device;              /* CUDA device ordinal (0) */
} weft_backend_opts;

/* What weft_model_backend decided (SPEC §4.6). */
typedef struct weft_backend_plan {
    int slots;              /* streams open at once */
    int context;            /* positions per stream */
    size_t stream_bytes;    /* state bytes of one stream at `context` */
    size_t available_bytes; /* memory available when planned (after the weights) */
    /* kind "auto" on a build and machine with a GPU that cannot run this model (an unsupported family, head
     * size or weight layout: the GPU backend's WEFT_ENOTSUP): its reason; the CPU backend runs the model
     * instead. Empty otherwise. */
    char fallback[512];
} weft_backend_plan;

/* Builds the backend that runs m (the family resolves and checks every tensor here). m must outlive it;
 * destroy with out->ops->destroy(out->self). */
weft_status weft_model_backend(const weft_model *m, const weft_backend_opts *opts, weft_backend *out,
                               weft_err *err);
/* Same, also reporting the plan. An explicit max_slots whose streams do not fit is refused with WEFT_ENOMEM
 * stating the numbers. plan may be NULL. Kind "auto" picks the GPU backend for llama and qwen3 when a device
 * is visible and falls back to the CPU when that backend refuses the model as unsupported (plan->fallback
 * says why); kind "cuda" never falls back. */
weft_status weft_model_backend_plan(const weft_model *m, const weft_backend_opts *opts, weft_backend *out,
                                    weft_backend_plan *plan, weft_err *err);

/* Context length the model was trained for (max_position_embeddings, or 4096 when unknown). */
int weft_model_context(const weft_model *m);

/* ---- text <-> tokens through the model's tokenizer (WEFT_ENOTSUP when it has none) ---- */

/* Encodes text[0..len) into *ids (malloc'd, caller frees), *n ids. add_special: add BOS/EOS as the tokenizer
 * does for a plain prompt; parse_special: special-token text (e.g. "<|im_start|>") becomes its id. */
weft_status weft_model_encode(const weft_model *m, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t **ids, int *n, weft_err *err);

/* Incremental detokenizer: feed ids one at a time; only complete UTF-8 is emitted. */
typedef struct weft_model_detok weft_model_detok;
weft_model_detok *weft_model_detok_new(const weft_model *m);
/* Appends the text completed by `id` to out (at most cap bytes; returns bytes written, or the bytes needed
 * when more than cap). Special tokens render as their text (e.g. "</s>") unless skip_special. */
size_t weft_model_detok_feed(weft_model_detok *d, int32_t id, bool skip_special, char *out, size_t cap);
/* Flushes held bytes at the end of a reply (an incomplete UTF-8 tail becomes U+FFFD). */
size_t weft_model_detok_flush(weft_model_detok *d, char *out, size_t cap);
void weft_model_detok_free(weft_model_detok *d);

#ifdef __cplusplus
}
#endif
#endif
