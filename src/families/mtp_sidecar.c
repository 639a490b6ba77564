/* mtp_sidecar.c — an MTP head shipped beside an MLX checkpoint (families-and-formats §6.2: mlx-lm drops
 * `mtp.*` when converting, TensorFold ships it as `mtp-4bit.safetensors`). Its tensors join the checkpoint's
 * set under hub names, so the families' head loaders (qwen3_5_mtp.c, nemotron_h_mtp.c) read them as they
 * read a hub checkpoint's:
 * - quantized modules (`P.weight` uint32 + `P.scales` + `P.biases`) are folded into MLX affine tensors with
 *   weft_mlx_fold; each module's bits come from its shapes (words·32 / (scale_cols·group_size)), the group
 *   size from `__metadata__.group_size` (default 64), since one file mixes 4-bit linears and 8-bit routers;
 * - Nemotron sidecars drop the `mtp.` prefix (`layers.0.*`, `layers.1.*`): it is put back.
 * Whether a Qwen sidecar's zero-centred norms have their +1 baked in differs by producer; the qwen3_5 head
 * loader tells from the values (qwen3_5_mtp.c). */
#include "families/mtp.h"
#include "weft/safetensors.h"

#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The sidecar's `__metadata__.group_size`, or 64. */
static int meta_group_size(const char *path) {
    int gs = 64;
    FILE *f = fopen(path, "rb");
    unsigned char len8[8];
    if (!f) return gs;
    if (fread(len8, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | len8[i];
        char *head = n <= WEFT_SAFETENSORS_MAX_HEADER ? malloc((size_t)n + 1) : NULL;
        if (head && fread(head, 1, (size_t)n, f) == (size_t)n) {
            head[n] = 0;
            json_t *root = json_loads(head, 0, NULL);
            json_t *v = json_object_get(json_object_get(root, "__metadata__"), "group_size");
            if (json_is_string(v) && atoi(json_string_value(v)) > 0) gs = atoi(json_string_value(v));
            json_decref(root);
        }
        free(head);
    }
    fclose(f);
    return gs;
}

/* dir's first `mtp*.safetensors` in name order into path (false when there is none). */
static bool find_sidecar(const char *dir, char *path, size_t cap) {
    DIR *d = opendir(dir);
    if (!d) return false;
    char best[256] = "";
    for (struct dirent *e; (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (strncmp(e->d_name, "mtp", 3) || l < 15 || l >= sizeof best ||
            strcmp(e->d_name + l - 12, ".safetensors"))
            continue;
        if (!best[0] || strcmp(e->d_name, best) < 0) snprintf(best, sizeof best, "%s", e->d_name);
    }
    closedir(d);
    return best[0] && (size_t)snprintf(path, cap, "%s/%s", dir, best) < cap;
}

/* The quantization object for weft_mlx_fold: every sidecar module with its own bits. */
static weft_status quant_json(const weft_tensor_set *ts, char **names, size_t n, int gs, const char *path,
                              char **out, weft_err *err) {
    json_t *q = json_object(), *root = json_object();
    weft_status st = WEFT_OK;
    json_object_set_new(q, "group_size", json_integer(gs));
    json_object_set_new(q, "bits", json_integer(4));
    for (size_t i = 0; i < n && !st; i++) {
        size_t l = strlen(names[i]);
        if (l < 8 || strcmp(names[i] + l - 7, ".scales")) continue;
        char mod[512], wname[520];
        snprintf(mod, sizeof mod, "%.*s", (int)(l - 7), names[i]);
        snprintf(wname, sizeof wname, "%s.weight", mod);
        const weft_tensor *w = weft_tensor_set_get(ts, wname), *s = weft_tensor_set_get(ts, names[i]);
        int64_t words = w ? w->shape[w->ndim - 1] : 0, scols = s->shape[s->ndim - 1];
        int64_t bits = scols > 0 ? words * 32 / (scols * gs) : 0;
        if (!w || bits * scols * gs != words * 32 ||
            !(bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8)) {
            st = weft_err_set(err, WEFT_EFORMAT,
                              "%s: module %s: no bit width fits %lld words and %lld scales "
                              "per row (group size %d)",
                              path, mod, (long long)words, (long long)scols, gs);
            break;
        }
        json_t *m = json_object();
        json_object_set_new(m, "group_size", json_integer(gs));
        json_object_set_new(m, "bits", json_integer(bits));
        json_object_set_new(q, mod, m);
    }
    json_object_set_new(root, "quantization", q);
    *out = st ? NULL : json_dumps(root, JSON_COMPACT);
    json_decref(root);
    if (!st && !*out) st = weft_err_set(err, WEFT_ENOMEM, "out of memory");
    return st;
}

weft_status weft_mtp_sidecar_load(const char *dir, weft_tensor_set *ts, bool *loaded, weft_err *err) {
    char path[1024];
    if (loaded) *loaded = false;
    /* none, or the checkpoint kept its head (then the directory's own files already hold it) */
    if (weft_mtp_present(ts) || !find_sidecar(dir, path, sizeof path)) return WEFT_OK;
    size_t n0 = weft_tensor_set_count(ts);
    weft_status st = weft_safetensors_load_file(path, ts, NULL, err);
    if (st) return st;
    size_t n = weft_tensor_set_count(ts) - n0;
    char **names = calloc(n ? n : 1, sizeof *names);
    if (!names) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    for (size_t i = 0; i < n && !st; i++)
        if (!(names[i] = strdup(weft_tensor_set_at(ts, n0 + i)->name)))
            st = weft_err_set(err, WEFT_ENOMEM, "out of memory");
    char *qjson = NULL;
    if (!st) st = quant_json(ts, names, n, meta_group_size(path), path, &qjson, err);
    if (!st) st = weft_mlx_fold(ts, qjson, NULL, err);
    /* hub names: Nemotron sidecars drop the `mtp.` prefix */
    for (size_t i = 0; i < n && !st; i++) {
        const weft_tensor *t = weft_tensor_set_get(ts, names[i]);
        if (!t || strncmp(names[i], "mtp.", 4) == 0) continue; /* folded away, or already a hub name */
        char nm[600];
        snprintf(nm, sizeof nm, "mtp.%s", names[i]);
        weft_tensor copy = *t;
        copy.name = nm;
        st = weft_tensor_set_add(ts, &copy, err);
        if (!st) weft_tensor_set_remove(ts, names[i]);
    }
    for (size_t i = 0; i < n; i++) free(names[i]);
    free(names);
    free(qjson);
    if (!st && loaded) *loaded = true;
    return st;
}
