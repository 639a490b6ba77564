/* safetensors reader (docs families-and-formats §6.1): one file, or a checkpoint directory (sharded through
 * model.safetensors.index.json, or model*.safetensors). Files are mmap'd read-only and the mapping is owned
 * by the tensor set; every header field is validated before a tensor is added, so nothing a file says can
 * make a later reader step outside the mapping. */
#include "weft/safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_dtype {
    const char *name;
    weft_dtype dt;
    int size;
} st_dtype;

static const st_dtype ST_DTYPES[] = {
    {"F64", WEFT_DT_F64, 8}, {"F32", WEFT_DT_F32, 4}, {"F16", WEFT_DT_F16, 2}, {"BF16", WEFT_DT_BF16, 2},
    {"I64", WEFT_DT_I64, 8}, {"I32", WEFT_DT_I32, 4}, {"I16", WEFT_DT_I16, 2}, {"I8", WEFT_DT_I8, 1},
    {"U32", WEFT_DT_U32, 4}, {"U16", WEFT_DT_U16, 2}, {"U8", WEFT_DT_U8, 1},   {"BOOL", WEFT_DT_BOOL, 1},
};

/* Valid safetensors dtypes (safetensors `Dtype`) that weft does not decode: refused as "not supported" rather
 * than "corrupt". */
static const char *const ST_UNSUPPORTED[] = {"U64",     "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",
                                             "F6_E2M3", "F6_E3M2", "C64",     "E8M0"};

/* One validated header entry. */
typedef struct st_entry {
    const char *name; /* borrowed from the JSON header */
    weft_dtype dt;
    int ndim;
    int64_t shape[WEFT_MAX_DIMS];
    uint64_t begin, end;
} st_entry;

static uint64_t read_le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Parses one tensor entry; returns 0 or a status with err set. */
static weft_status parse_entry(const char *path, const char *name, json_t *v, uint64_t data_len, st_entry *e,
                               weft_err *err) {
    if (!json_is_object(v))
        return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: header entry is not an object", path, name);
    json_t *jd = json_object_get(v, "dtype"), *js = json_object_get(v, "shape");
    json_t *jo = json_object_get(v, "data_offsets");
    if (!json_is_string(jd))
        return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: missing or non-string dtype", path, name);
    if (!json_is_array(js))
        return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: missing or non-array shape", path, name);
    if (!json_is_array(jo) || json_array_size(jo) != 2)
        return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: data_offsets is not a [begin, end] pair", path,
                            name);
    const char *ds = json_string_value(jd);
    int size = 0;
    for (size_t i = 0; i < sizeof ST_DTYPES / sizeof ST_DTYPES[0]; i++)
        if (strcmp(ds, ST_DTYPES[i].name) == 0) {
            e->dt = ST_DTYPES[i].dt;
            size = ST_DTYPES[i].size;
        }
    if (!size) {
        for (size_t i = 0; i < sizeof ST_UNSUPPORTED / sizeof ST_UNSUPPORTED[0]; i++)
            if (strcmp(ds, ST_UNSUPPORTED[i]) == 0)
                return weft_err_set(err, WEFT_ENOTSUP, "%s: tensor %s: dtype %s is not supported", path, name,
                                    ds);
        return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: unknown dtype \"%.32s\"", path, name, ds);
    }

    /* shape: [] is a scalar (stored as [1]); more than WEFT_MAX_DIMS dims merge the outermost into dim 0 */
    size_t nd = json_array_size(js);
    uint64_t dims[64];
    if (nd > 64) return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: %zu dimensions", path, name, nd);
    uint64_t numel = 1;
    for (size_t i = 0; i < nd; i++) {
        json_t *d = json_array_get(js, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0)
            return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: shape[%zu] is not a non-negative integer",
                                path, name, i);
        dims[i] = (uint64_t)json_integer_value(d);
        if (__builtin_mul_overflow(numel, dims[i], &numel) || numel > (UINT64_C(1) << 62))
            return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: shape overflows", path, name);
    }
    if (nd == 0) {
        e->ndim = 1;
        e->shape[0] = 1;
    } else {
        size_t extra = nd > WEFT_MAX_DIMS ? nd - WEFT_MAX_DIMS : 0;
        uint64_t d0 = 1;
        for (size_t i = 0; i <= extra; i++) d0 *= dims[i];
        e->ndim = (int)(nd - extra);
        e->shape[0] = (int64_t)d0;
        for (size_t i = extra + 1; i < nd; i++) e->shape[i - extra] = (int64_t)dims[i];
    }

    json_t *jb = json_array_get(jo, 0), *je = json_array_get(jo, 1);
    if (!json_is_integer(jb) || !json_is_integer(je) || json_integer_value(jb) < 0 ||
        json_integer_value(je) < json_integer_value(jb))
        return weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s: data_offsets are not 0 <= begin <= end", path,
                            name);
    e->begin = (uint64_t)json_integer_value(jb);
    e->end = (uint64_t)json_integer_value(je);
    uint64_t want = numel * (uint64_t)size; /* numel ≤ 2^62 and size ≤ 8: no overflow */
    if (e->end - e->begin != want)
        return weft_err_set(err, WEFT_EFORMAT,
                            "%s: tensor %s: data_offsets span %llu bytes but %s × %llu elements need %llu",
                            path, name, (unsigned long long)(e->end - e->begin), ds,
                            (unsigned long long)numel, (unsigned long long)want);
    if (e->end > data_len)
        return weft_err_set(err, WEFT_EFORMAT,
                            "%s: tensor %s: data_offsets end %llu is past the data section (%llu bytes)",
                            path, name, (unsigned long long)e->end, (unsigned long long)data_len);
    e->name = name;
    return WEFT_OK;
}

static int cmp_entry(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static weft_status parse_metadata(const char *path, json_t *meta, bool *is_mlx, weft_err *err) {
    if (!json_is_object(meta))
        return weft_err_set(err, WEFT_EFORMAT, "%s: __metadata__ is not an object", path);
    const char *k;
    json_t *v;
    json_object_foreach(meta, k, v) {
        if (!json_is_string(v))
            return weft_err_set(err, WEFT_EFORMAT, "%s: __metadata__.%s is not a string", path, k);
        if (strcmp(k, "format") == 0 && strcmp(json_string_value(v), "mlx") == 0 && is_mlx) *is_mlx = true;
    }
    return WEFT_OK;
}

/* Validates the parsed header and adds its tensors; data points at the data section. */
static weft_status add_header(const char *path, json_t *root, const uint8_t *data, uint64_t data_len,
                              weft_tensor_set *set, bool *is_mlx, weft_err *err) {
    size_t n = json_object_size(root);
    st_entry *ents = calloc(n ? n : 1, sizeof *ents);
    if (!ents) return weft_err_set(err, WEFT_ENOMEM, "%s: out of memory reading the header", path);
    size_t ne = 0;
    weft_status st = WEFT_OK;
    const char *k;
    json_t *v;
    json_object_foreach(root, k, v) {
        if (strcmp(k, "__metadata__") == 0)
            st = parse_metadata(path, v, is_mlx, err);
        else if (!*k)
            st = weft_err_set(err, WEFT_EFORMAT, "%s: a tensor has an empty name", path);
        else
            st = parse_entry(path, k, v, data_len, &ents[ne++], err);
        if (st) goto done;
    }
    /* overlaps: sorted by begin, each non-empty range must start at or after the furthest end so far */
    qsort(ents, ne, sizeof *ents, cmp_entry);
    uint64_t far = 0;
    const char *far_name = NULL;
    for (size_t i = 0; i < ne; i++) {
        if (ents[i].begin == ents[i].end) continue;
        if (far_name && ents[i].begin < far) {
            st = weft_err_set(err, WEFT_EFORMAT, "%s: tensors %s and %s overlap in the data section", path,
                              far_name, ents[i].name);
            goto done;
        }
        far = ents[i].end;
        far_name = ents[i].name;
    }
    for (size_t i = 0; i < ne; i++) {
        weft_tensor t = {0};
        t.name = ents[i].name;
        t.dtype = ents[i].dt;
        t.ndim = ents[i].ndim;
        memcpy(t.shape, ents[i].shape, sizeof t.shape);
        t.data = data + ents[i].begin;
        t.nbytes = (size_t)(ents[i].end - ents[i].begin);
        st = weft_tensor_set_add(set, &t, err);
        if (st) {
            weft_err_set(err, st, "%s: tensor %s: %s", path, ents[i].name,
                         st == WEFT_EFORMAT ? "name already loaded from another file"
                                            : "cannot add to the set");
            goto done;
        }
    }
done:
    free(ents);
    return st;
}

weft_status weft_safetensors_load_file(const char *path, weft_tensor_set *set, bool *is_mlx, weft_err *err) {
    /* O_NONBLOCK: a FIFO under this name would block open() until a writer came; it is refused below as
     * not a regular file (no effect on regular files) */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return weft_err_set(err, WEFT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        close(fd);
        return weft_err_set(err, WEFT_EIO, "%s: not a readable regular file", path);
    }
    uint64_t size = (uint64_t)sb.st_size;
    if (size < 8) {
        close(fd);
        return weft_err_set(err, WEFT_EFORMAT, "%s: file is %llu bytes, too short for a safetensors header",
                            path, (unsigned long long)size);
    }
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int merr = errno;
    close(fd);
    if (map == MAP_FAILED) return weft_err_set(err, WEFT_EIO, "%s: mmap failed: %s", path, strerror(merr));
    weft_tensor_set_own_mapping(set, map, (size_t)size);

    const uint8_t *base = map;
    uint64_t hlen = read_le64(base);
    if (hlen > WEFT_SAFETENSORS_MAX_HEADER)
        return weft_err_set(err, WEFT_EFORMAT, "%s: header length %llu exceeds the %u-byte cap", path,
                            (unsigned long long)hlen, WEFT_SAFETENSORS_MAX_HEADER);
    if (hlen > size - 8)
        return weft_err_set(err, WEFT_EFORMAT,
                            "%s: header length %llu runs past the end of the file (%llu bytes)", path,
                            (unsigned long long)hlen, (unsigned long long)size);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)base + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return weft_err_set(err, WEFT_EFORMAT, "%s: header is not valid JSON: %s (line %d, column %d)", path,
                            jerr.text, jerr.line, jerr.column);
    weft_status st;
    if (!json_is_object(root))
        st = weft_err_set(err, WEFT_EFORMAT, "%s: header is not a JSON object", path);
    else
        st = add_header(path, root, base + 8 + hlen, size - 8 - hlen, set, is_mlx, err);
    json_decref(root);
    return st;
}

/* ---- directories ---- */

static char *join_path(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_file(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Loads one shard and checks that each of its tensors is listed in weight_map under this shard. */
static weft_status load_shard(const char *dir, const char *shard, json_t *wmap, const char *index_path,
                              weft_tensor_set *set, weft_safetensors_dir_info *info, weft_err *err) {
    char *path = join_path(dir, shard);
    if (!path) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    if (!is_file(path)) {
        weft_status st =
            weft_err_set(err, WEFT_EFORMAT, "%s: weight_map names shard %s, which is missing (%s)",
                         index_path, shard, path);
        free(path);
        return st;
    }
    size_t before = weft_tensor_set_count(set);
    weft_status st = weft_safetensors_load_file(path, set, &info->is_mlx, err);
    if (!st) {
        info->n_files++;
        for (size_t i = before; i < weft_tensor_set_count(set) && !st; i++) {
            const char *name = weft_tensor_set_at(set, i)->name;
            const char *want = json_string_value(json_object_get(wmap, name));
            if (!want)
                st = weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s is in shard %s but not in weight_map",
                                  index_path, name, shard);
            else if (strcmp(want, shard) != 0)
                st = weft_err_set(err, WEFT_EFORMAT, "%s: tensor %s is in shard %s but weight_map says %s",
                                  index_path, name, shard, want);
        }
    }
    free(path);
    return st;
}

static weft_status load_index(const char *dir, const char *index_path, weft_tensor_set *set,
                              weft_safetensors_dir_info *info, weft_err *err) {
    json_error_t jerr;
    json_t *root = json_load_file(index_path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return weft_err_set(err, WEFT_EFORMAT, "%s: not valid JSON: %s (line %d)", index_path, jerr.text,
                            jerr.line);
    weft_status st = WEFT_OK;
    char **shards = NULL;
    size_t nsh = 0;
    json_t *wmap = json_object_get(root, "weight_map");
    if (!json_is_object(wmap)) {
        st = weft_err_set(err, WEFT_EFORMAT, "%s: missing weight_map object", index_path);
        goto done;
    }
    shards = calloc(json_object_size(wmap) + 1, sizeof *shards);
    if (!shards) {
        st = weft_err_set(err, WEFT_ENOMEM, "out of memory reading %s", index_path);
        goto done;
    }
    const char *k;
    json_t *v;
    json_object_foreach(wmap, k, v) {
        const char *f = json_string_value(v);
        if (!f || !*f || strchr(f, '/')) {
            st = weft_err_set(err, WEFT_EFORMAT, "%s: weight_map[%s] is not a file name in the directory",
                              index_path, k);
            goto done;
        }
        shards[nsh++] = (char *)f;
    }
    qsort(shards, nsh, sizeof *shards, cmp_str);
    size_t before = weft_tensor_set_count(set);
    for (size_t i = 0; i < nsh && !st; i++) {
        if (i && strcmp(shards[i], shards[i - 1]) == 0) continue;
        st = load_shard(dir, shards[i], wmap, index_path, set, info, err);
    }
    if (!st && weft_tensor_set_count(set) - before != json_object_size(wmap)) {
        json_object_foreach(wmap, k, v) {
            if (!weft_tensor_set_get(set, k)) {
                st = weft_err_set(err, WEFT_EFORMAT, "%s: weight_map lists %s in %s, but that shard lacks it",
                                  index_path, k, json_string_value(v));
                break;
            }
        }
    }
    info->sharded = true;
done:
    free(shards);
    json_decref(root);
    return st;
}

/* Files of dir ending in .safetensors, sorted; with only_model, those starting with "model". */
static weft_status list_files(const char *dir, bool only_model, char ***out, size_t *n, weft_err *err) {
    DIR *d = opendir(dir);
    if (!d) return weft_err_set(err, WEFT_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    char **v = NULL;
    size_t cnt = 0, cap = 0;
    weft_status st = WEFT_OK;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len <= 12 || strcmp(de->d_name + len - 12, ".safetensors") != 0) continue;
        if (only_model && strncmp(de->d_name, "model", 5) != 0) continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 8;
            char **nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                st = weft_err_set(err, WEFT_ENOMEM, "out of memory listing %s", dir);
                break;
            }
            v = nv;
        }
        if (!(v[cnt] = strdup(de->d_name))) {
            st = weft_err_set(err, WEFT_ENOMEM, "out of memory listing %s", dir);
            break;
        }
        cnt++;
    }
    closedir(d);
    if (cnt) qsort(v, cnt, sizeof *v, cmp_str);
    *out = v;
    *n = cnt;
    return st;
}

static void free_list(char **v, size_t n) {
    for (size_t i = 0; i < n; i++) free(v[i]);
    free(v);
}

weft_status weft_safetensors_load_dir(const char *dir, weft_tensor_set *set, weft_safetensors_dir_info *info,
                                      weft_err *err) {
    weft_safetensors_dir_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    char *index = join_path(dir, "model.safetensors.index.json");
    char *single = join_path(dir, "model.safetensors");
    weft_status st = WEFT_OK;
    if (!index || !single) {
        st = weft_err_set(err, WEFT_ENOMEM, "out of memory");
    } else if (is_file(index)) {
        st = load_index(dir, index, set, info, err);
    } else if (is_file(single)) {
        st = weft_safetensors_load_file(single, set, &info->is_mlx, err);
        if (!st) info->n_files = 1;
    } else {
        char **files = NULL;
        size_t n = 0;
        st = list_files(dir, true, &files, &n, err);
        if (!st && n == 0) {
            free_list(files, n);
            files = NULL;
            st = list_files(dir, false, &files, &n, err);
        }
        if (!st && n == 0) st = weft_err_set(err, WEFT_EIO, "%s: no .safetensors file in the directory", dir);
        for (size_t i = 0; i < n && !st; i++) {
            char *p = join_path(dir, files[i]);
            if (!p)
                st = weft_err_set(err, WEFT_ENOMEM, "out of memory");
            else
                st = weft_safetensors_load_file(p, set, &info->is_mlx, err);
            if (!st) info->n_files++;
            free(p);
        }
        free_list(files, n);
    }
    free(index);
    free(single);
    return st;
}

/* ---- whole checkpoint ---- */

weft_status weft_safetensors_load_checkpoint(const char *dir, weft_tensor_set *set,
                                             weft_checkpoint_info *info, weft_err *err) {
    weft_checkpoint_info local;
    if (!info) info = &local;
    memset(info, 0, sizeof *info);
    weft_status st = weft_safetensors_load_dir(dir, set, &info->files, err);
    if (st) return st;
    char *cfg_path = join_path(dir, "config.json");
    if (!cfg_path) return weft_err_set(err, WEFT_ENOMEM, "out of memory");
    char *text;
    st = weft_read_file(cfg_path, &text, NULL, err);
    free(cfg_path);
    if (st) return st;
    st = weft_mlx_fold(set, text, &info->mlx, err);
    free(text);
    if (st) return st;
    st = weft_canonicalize_names(set, err);
    if (st) return st;
    info->is_mlx = info->files.is_mlx || info->mlx.present;
    info->weight_bytes = weft_tensor_set_bytes(set);
    return WEFT_OK;
}
