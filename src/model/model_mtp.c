/* model_mtp.c — the MTP draft head of a GGUF model that llama.cpp's converter wrote as a separate file
 * (`convert_hf_to_gguf.py --mtp` → mtp-<Name>-<Type>.gguf; the model itself converted with --no-nextn). As
 * for an MLX checkpoint's mtp*.safetensors sidecar (families-and-formats §6.2), the file is found beside the
 * model, with no option:
 *   1. <dir>/mtp-<model file name>: used when present, and an error when it does not fit the model;
 *   2. else the first <dir>/mtp-*.gguf in name order that fits the model (weft_gguf_mtp_fits: architecture,
 *      block count, hidden size, vocabulary). The converter's default names differ between the two files
 *      ({Name}-{Size}-{Type}.gguf and mtp-{Name}-{Type}.gguf) and one head serves every quantization of its
 *      model; files that do not fit, or cannot be opened, are other models' heads and are passed over (one
 *      that fits but holds a corrupt NextN block is an error).
 * A head only proposes drafts (SPEC §4.5): one that fits the shapes but was trained for another checkpoint
 * costs speed, never a different reply. A model file with NextN blocks of its own looks no further, and a
 * head file given as the model is refused (it has no trunk blocks; llama.cpp tells them apart the same way).
 */
#include "model_internal.h"
#include "weft/gguf.h"
#include "weft/safetensors.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int by_name(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's `mtp-*.gguf` names other than skip, sorted (malloc'd; *n of them). NULL with *n = 0 when none. */
static char **candidates(const char *dir, const char *skip, size_t *n) {
    *n = 0;
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    size_t cap = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l < 10 || strncmp(e->d_name, "mtp-", 4) || strcmp(e->d_name + l - 5, ".gguf") ||
            !strcmp(e->d_name, skip))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 8;
            char **grown = realloc(names, cap * sizeof *names);
            if (!grown) break;
            names = grown;
        }
        if (!(names[*n] = strdup(e->d_name))) break;
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(names, *n, sizeof *names, by_name);
    return names;
}

/* Loads the head file at path into m when it fits (must: an error when it does not). *done = loaded. */
static weft_status try_head(weft_model *m, const char *path, bool must, bool *done, weft_err *err) {
    *done = false;
    weft_gguf *h = NULL;
    weft_status st = weft_gguf_open_file(path, &h, err);
    if (st) {
        weft_gguf_close(h);
        return must ? st : WEFT_OK;
    }
    char why[256];
    if (!must && !weft_gguf_mtp_fits(h, m->gguf, why, sizeof why)) {
        weft_gguf_close(h);
        return WEFT_OK;
    }
    int64_t n = 0;
    size_t bytes = 0;
    st = weft_gguf_mtp_head(h, m->gguf, m->tensors, &n, &bytes, err);
    weft_gguf_close(h); /* the set holds the mapping now (also after a failing tensor) */
    if (!st) st = weft_check_memory(bytes, "the MTP head weights", err);
    if (st) return st;
    m->cfg.mtp_num_hidden_layers = n;
    free(m->mtp_path);
    m->mtp_path = strdup(path); /* for `weft info`; NULL when short of memory, which only loses that line */
    *done = true;
    return WEFT_OK;
}

static bool has_nextn_export(const weft_gguf *g) {
    const char *arch = weft_gguf_arch(g);
    return arch && (!strcmp(arch, "qwen35") || !strcmp(arch, "qwen35moe"));
}

weft_status weft_model_gguf_not_head(const weft_gguf *g, const char *path, weft_err *err) {
    char key[64];
    if (!has_nextn_export(g)) return WEFT_OK;
    snprintf(key, sizeof key, "%s.nextn_predict_layers", weft_gguf_arch(g));
    if (weft_gguf_find(g, key) >= 0 && !weft_gguf_tensor_find(g, "blk.0.attn_norm.weight"))
        return weft_err_set(err, WEFT_EFORMAT,
                            "%s holds only an MTP head (llama.cpp convert_hf_to_gguf.py --mtp), not a model: "
                            "load the model's GGUF, with this file beside it",
                            path);
    return WEFT_OK;
}

weft_status weft_model_gguf_mtp(weft_model *m, weft_err *err) {
    /* no NextN export for other architectures; a model file with its own NextN blocks looks no further */
    if (!has_nextn_export(m->gguf) || m->cfg.mtp_num_hidden_layers > 0) return WEFT_OK;
    const char *slash = strrchr(m->path, '/');
    const char *base = slash ? slash + 1 : m->path;
    char dir[1024], path[2048];
    int w = slash ? snprintf(dir, sizeof dir, "%.*s", (int)(slash - m->path), m->path)
                  : snprintf(dir, sizeof dir, ".");
    if (w < 0 || (size_t)w >= sizeof dir) return WEFT_OK; /* no directory to look in */
    if (!dir[0]) snprintf(dir, sizeof dir, "/");
    bool done = false;
    char exact[300];
    if ((size_t)snprintf(exact, sizeof exact, "mtp-%s", base) < sizeof exact &&
        (size_t)snprintf(path, sizeof path, "%s/%s", dir, exact) < sizeof path && !access(path, F_OK))
        return try_head(m, path, true, &done, err);
    size_t n = 0;
    char **names = candidates(dir, base, &n);
    weft_status st = WEFT_OK;
    for (size_t i = 0; i < n && !done && !st; i++)
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, names[i]) < sizeof path)
            st = try_head(m, path, false, &done, err);
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    return st;
}
