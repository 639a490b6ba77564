/* Loading a model: format detection, config, weights (checked against memory first), tokenizer, template. */
#include "weft/model.h"

#include "weft/cpu_backend.h"
#include "weft/families.h"
#include "weft/gguf.h"
#include "weft/safetensors.h"
#include "model_internal.h"
#ifdef WEFT_HAVE_CUDA
#include "weft/cuda_backend.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *id_from_path(const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    size_t len = n - b;
    if (len > 5 && !strncmp(path + n - 5, ".gguf", 5)) len -= 5;
    char *id = malloc(len + 1);
    if (id) {
        memcpy(id, path + b, len);
        id[len] = 0;
    }
    return id;
}

/* A short description of the weight storage: the dtype of the matrices, or the mix. */
static void describe_quant(weft_model *m) {
    int counts[WEFT_DT_COUNT] = {0};
    int bits = 0, gs = 0;
    for (size_t i = 0; i < weft_tensor_set_count(m->tensors); i++) {
        const weft_tensor *t = weft_tensor_set_at(m->tensors, i);
        if (t->ndim < 2) continue;
        counts[t->dtype]++;
        if (t->dtype == WEFT_DT_MLX_AFFINE && !bits) {
            bits = t->bits;
            gs = t->group_size;
        }
    }
    int best = -1, kinds = 0;
    for (int d = 0; d < WEFT_DT_COUNT; d++) {
        if (!counts[d]) continue;
        kinds++;
        if (best < 0 || counts[d] > counts[best]) best = d;
    }
    if (best < 0)
        snprintf(m->quant, sizeof m->quant, "none");
    else if (best == WEFT_DT_MLX_AFFINE)
        snprintf(m->quant, sizeof m->quant, "mlx affine %d-bit g%d%s", bits, gs, kinds > 1 ? " (mixed)" : "");
    else
        snprintf(m->quant, sizeof m->quant, "%s%s", weft_dtype_get((weft_dtype)best)->name,
                 kinds > 1 ? " (mixed)" : "");
}

static weft_status load_gguf(weft_model *m, weft_gguf *g, weft_err *err) {
    m->gguf = g;
    m->format = WEFT_FORMAT_GGUF;
    weft_status st = weft_gguf_config(g, &m->cfg, err);
    if (st) return st;
    size_t bytes = 0;
    for (size_t i = 0; i < weft_gguf_tensor_count(g); i++) bytes += weft_gguf_tensor_at(g, i)->nbytes;
    /* The GGUF is mmap'd: pages are read on first use; refuse what cannot fit before touching them. */
    st = weft_check_memory(bytes, "the model weights", err);
    if (st) return st;
    m->tensors = weft_tensor_set_new();
    if (!m->tensors) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    st = weft_gguf_tensors(g, m->tensors, err);
    if (st) return st;
    /* The set now owns the mapping; cfg.rope.freq_divisors still points into it (same address). */
    return weft_model_tokenizer_from_gguf(m, err);
}

static weft_status load_dir(weft_model *m, weft_err *err) {
    weft_status st = weft_config_load_dir(m->path, &m->cfg, err);
    if (st) return st;
    m->tensors = weft_tensor_set_new();
    if (!m->tensors) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    weft_checkpoint_info info;
    st = weft_safetensors_load_checkpoint(m->path, m->tensors, &info, err);
    if (st) return st;
    m->format = info.is_mlx ? WEFT_FORMAT_MLX : WEFT_FORMAT_SAFETENSORS;
    /* an MLX conversion has no MTP head: TensorFold ships it beside as mtp*.safetensors (§6.2) */
    if (info.is_mlx && (st = weft_mtp_sidecar_load(m->path, m->tensors, NULL, err))) return st;
    st = weft_check_memory(info.weight_bytes, "the model weights", err);
    if (st) return st;
    return weft_model_tokenizer_from_dir(m, err);
}

static weft_status finish(weft_model *m, weft_err *err) {
    m->weights_bytes = weft_tensor_set_bytes(m->tensors);
    describe_quant(m);
    if (m->cfg.family == WEFT_FAMILY_UNKNOWN)
        return weft_err_set(err, WEFT_ENOTSUP, "%s: unknown model family", m->path);
    return WEFT_OK;
}

weft_status weft_model_load(const char *path, weft_model **out, weft_err *err) {
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0) return weft_err_set(err, WEFT_EIO, "%s: no such file or directory", path);
    weft_model *m = calloc(1, sizeof *m);
    if (!m) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    m->path = strdup(path);
    m->id = id_from_path(path);
    weft_status st;
    if (S_ISDIR(sb.st_mode)) {
        st = load_dir(m, err);
    } else {
        weft_gguf *g = NULL;
        st = weft_gguf_open_file(path, &g, err);
        if (!st) st = weft_model_gguf_not_head(g, path, err); /* llama.cpp's --mtp file: not a model */
        if (!st)
            st = load_gguf(m, g, err);
        else
            weft_gguf_close(g);
        if (!st) st = weft_model_gguf_mtp(m, err); /* a head converted to its own file, beside the model */
    }
    if (!st) st = finish(m, err);
    if (st) {
        weft_model_free(m);
        return st;
    }
    *out = m;
    return WEFT_OK;
}

weft_status weft_model_load_gguf_memory(const char *name, const void *data, size_t len, weft_model **out,
                                        weft_err *err) {
    *out = NULL;
    weft_model *m = calloc(1, sizeof *m);
    if (!m) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    m->path = strdup(name);
    m->id = strdup(name);
    weft_gguf *g = NULL;
    weft_status st = weft_gguf_open_memory(data, len, &g, err);
    if (!st)
        st = load_gguf(m, g, err);
    else
        weft_gguf_close(g);
    if (!st) st = finish(m, err);
    if (st) {
        weft_model_free(m);
        return st;
    }
    *out = m;
    return WEFT_OK;
}

void weft_model_free(weft_model *m) {
    if (!m) return;
    weft_model_tokenizer_free(m);
    weft_tensor_set_free(m->tensors);
    weft_gguf_close(m->gguf);
    free(m->chat_template);
    free(m->bos_text);
    free(m->eos_text);
    free(m->mtp_path);
    free(m->path);
    free(m->id);
    free(m);
}

int weft_model_context(const weft_model *m) {
    int64_t n = m->cfg.max_position_embeddings;
    if (n <= 0) n = 4096;
    if (n > (1 << 30)) n = 1 << 30;
    return (int)n;
}

/* Streams take at most this share of the memory available after the weights; the rest is left for the
 * prompt cache, activations and the OS. */
#define STREAM_SHARE 0.5

weft_status weft_model_backend_plan(const weft_model *m, const weft_backend_opts *opts, weft_backend *out,
                                    weft_backend_plan *plan, weft_err *err) {
    const bool act_f16 = opts->activations && !strcmp(opts->activations, "f16");
    if (opts->activations && !act_f16 && strcmp(opts->activations, "fp32"))
        return weft_err_set(err, WEFT_EINVAL, "--activations '%s': expected fp32 or f16", opts->activations);
#ifdef WEFT_HAVE_CUDA
    const bool want_auto = !opts->kind || !strcmp(opts->kind, "auto");
    const bool dense = m->cfg.family == WEFT_FAMILY_LLAMA || m->cfg.family == WEFT_FAMILY_QWEN3;
    if ((opts->kind && !strcmp(opts->kind, "cuda")) || (want_auto && dense && weft_cuda_device_count() > 0)) {
        int ctx = opts->max_context > 0 ? opts->max_context : weft_model_context(m);
        int slots = opts->max_slots > 0 ? opts->max_slots : 1;
        weft_cuda_backend_opts co = {.device = opts->device,
                                     .max_slots = slots,
                                     .max_rows = opts->max_rows > 0 ? opts->max_rows : 256,
                                     .max_context = ctx,
                                     .act_f16 = act_f16};
        if (plan) *plan = (weft_backend_plan){slots, ctx, 0, 0, ""};
        weft_err cerr = {0}; /* the GPU's answer, kept for the fallback note */
        const weft_status st = weft_cuda_backend_new(&m->cfg, m->tensors, &co, out, &cerr);
        if (st != WEFT_ENOTSUP || !want_auto) {
            if (st && err) *err = cerr;
            return st;
        }
        /* auto: a model the GPU backend does not take runs on the CPU, saying why */
        weft_backend_opts cpu_opts = *opts;
        cpu_opts.kind = "cpu";
        weft_backend_plan cpu_plan;
        const weft_status cst = weft_model_backend_plan(m, &cpu_opts, out, &cpu_plan, err);
        if (cst) {
            if (err) /* both backends refused: say both */
                snprintf(err->msg + strlen(err->msg), sizeof err->msg - strlen(err->msg),
                         " (the GPU backend refused the model too: %.200s)", cerr.msg);
            return cst;
        }
        if (plan) {
            *plan = cpu_plan;
            snprintf(plan->fallback, sizeof plan->fallback, "%s", cerr.msg);
        }
        return cst;
    }
#endif
    if (opts->kind && strcmp(opts->kind, "cpu") && strcmp(opts->kind, "auto"))
        return weft_err_set(err, WEFT_ENOTSUP, "backend '%s' is not available in this build (cpu only)",
                            opts->kind);
    if (act_f16) /* the CPU kernels define fp32 activations only (SPEC §5.5) */
        return weft_err_set(err, WEFT_ENOTSUP,
                            "--activations f16 is a CUDA backend option; the CPU backend computes in fp32");
    int ctx = opts->max_context > 0 ? opts->max_context : weft_model_context(m);
    weft_family_opts fo = {opts->max_rows > 0 ? opts->max_rows : 256, ctx, m->format == WEFT_FORMAT_MLX};
    weft_family_model fam;
    weft_status st = weft_family_create(&m->cfg, m->tensors, &fo, &fam, err);
    if (st) return st;
    size_t avail = weft_mem_available(), budget = (size_t)((double)avail * STREAM_SHARE);
    size_t per = fam.ops->state_bytes(fam.self, ctx);
    if (opts->max_context <= 0 && avail)
        while (per > budget && ctx > 256) { /* the trained context, lowered to what fits one stream */
            ctx /= 2;
            per = fam.ops->state_bytes(fam.self, ctx);
        }
    int slots = opts->max_slots;
    if (slots <= 0) {
        slots = avail && per ? (int)(budget / per) : 1;
        if (slots > 64) slots = 64;
        if (slots < 1) slots = 1;
    }
    if (avail && (double)per * slots > (double)budget) {
        fam.ops->destroy(fam.self);
        return weft_err_set(
            err, WEFT_ENOMEM,
            "%d streams of %d positions need %.1f MiB of state (%.1f MiB each) but only %.1f MiB "
            "(half of the %.1f MiB available) can hold streams; lower --parallel or --context",
            slots, ctx, (double)per * slots / 1048576.0, (double)per / 1048576.0, (double)budget / 1048576.0,
            (double)avail / 1048576.0);
    }
    if (plan) *plan = (weft_backend_plan){slots, ctx, per, avail, ""};
    int threads = opts->threads;
    if (threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        threads = n > 0 ? (int)n : 1;
    }
    weft_cpu_backend_opts co = {threads, slots};
    return weft_cpu_backend_new(fam, &co, out, err);
}

weft_status weft_model_backend(const weft_model *m, const weft_backend_opts *opts, weft_backend *out,
                               weft_err *err) {
    return weft_model_backend_plan(m, opts, out, NULL, err);
}
