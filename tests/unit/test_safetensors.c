/* safetensors reader: every fixture against its keys.json, sharded checkpoints, corrupt files (each a named
 * error), and the memory check. */
#include "test_safetensors_util.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* keys.json: name → [dtype, shape]. Compares every entry with the loaded set. */
static void check_against_keys(const char *fixture) {
    char path[512];
    st_fixture_path(path, sizeof path, fixture, "keys.json");
    json_error_t jerr;
    json_t *keys = json_load_file(path, 0, &jerr);
    CHECK_MSG(keys != NULL, "%s: %s", path, jerr.text);
    if (!keys) return;
    weft_tensor_set *set = weft_tensor_set_new();
    weft_safetensors_dir_info info;
    weft_err err = {0};
    st_fixture_path(path, sizeof path, fixture, NULL);
    weft_status st = weft_safetensors_load_dir(path, set, &info, &err);
    CHECK_MSG(st == WEFT_OK, "%s: %s", fixture, err.msg);
    CHECK_EQ_INT(info.n_files, 1);
    CHECK(!info.sharded);
    CHECK_EQ_INT(info.is_mlx, strstr(fixture, "-mlx-") != NULL);
    CHECK_MSG(weft_tensor_set_count(set) == json_object_size(keys), "%s: %zu tensors, keys.json has %zu",
              fixture, weft_tensor_set_count(set), json_object_size(keys));
    const char *name;
    json_t *v;
    int bad = 0;
    json_object_foreach(keys, name, v) {
        const weft_tensor *t = weft_tensor_set_get(set, name);
        if (!t) {
            CHECK_MSG(t != NULL, "%s: %s missing", fixture, name);
            continue;
        }
        const char *dt = json_string_value(json_array_get(v, 0));
        json_t *shape = json_array_get(v, 1);
        size_t nd = json_array_size(shape);
        /* more than WEFT_MAX_DIMS dims: the outer ones merge into dim 0 */
        size_t extra = nd > WEFT_MAX_DIMS ? nd - WEFT_MAX_DIMS : 0;
        int64_t want[WEFT_MAX_DIMS] = {1, 1, 1, 1};
        for (size_t i = 0; i < nd; i++) {
            int64_t d = json_integer_value(json_array_get(shape, i));
            if (i <= extra)
                want[0] *= d;
            else
                want[i - extra] = d;
        }
        bool ok = strcmp(dt, weft_dtype_get(t->dtype)->name) == 0 && t->ndim == (int)(nd - extra);
        for (int i = 0; ok && i < t->ndim; i++) ok = t->shape[i] == want[i];
        int64_t es = weft_dtype_get(t->dtype)->block_bytes;
        ok = ok && (int64_t)t->nbytes == weft_tensor_numel(t) * es;
        if (!ok && bad++ < 5)
            CHECK_MSG(ok, "%s: tensor %s dtype/shape differs from keys.json", fixture, name);
        if (nd > WEFT_MAX_DIMS) CHECK(t->ndim == WEFT_MAX_DIMS);
    }
    CHECK_MSG(bad == 0, "%s: %d tensors differ", fixture, bad);
    weft_tensor_set_free(set);
    json_decref(keys);
}

/* The bytes a tensor points at are the file's bytes at 8 + N + begin. */
static void check_bytes_against_file(void) {
    const char *path = TEST_DATA "fixtures/llama/model.safetensors";
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | buf[i];
    json_t *hdr = json_loadb((const char *)buf + 8, hlen, 0, NULL);
    weft_tensor_set *set = weft_tensor_set_new();
    weft_err err = {0};
    bool mlx = false;
    CHECK(weft_safetensors_load_file(path, set, &mlx, &err) == WEFT_OK);
    CHECK(!mlx);
    const char *name;
    json_t *v;
    size_t checked = 0;
    json_object_foreach(hdr, name, v) {
        if (!strcmp(name, "__metadata__")) continue;
        json_t *off = json_object_get(v, "data_offsets");
        size_t b = (size_t)json_integer_value(json_array_get(off, 0));
        const weft_tensor *t = weft_tensor_set_get(set, name);
        CHECK(t && memcmp(t->data, buf + 8 + hlen + b, t->nbytes) == 0);
        checked++;
    }
    CHECK_EQ_INT(checked, 21);
    /* a decoded row: model.norm.weight is bf16, decoded exactly */
    const weft_tensor *nw = weft_tensor_set_get(set, "model.norm.weight");
    CHECK(nw != NULL);
    if (nw) {
        float row[64];
        CHECK(weft_tensor_dequant_row(nw, 0, row, &err) == WEFT_OK);
        uint16_t h0;
        memcpy(&h0, nw->data, 2);
        CHECK(row[0] == weft_bf16_to_f32(h0));
    }
    weft_tensor_set_free(set);
    json_decref(hdr);
    free(buf);
}

/* Splits a fixture into two shards + index and checks the load equals the single-file one. */
static void check_sharded(const char *tmp) {
    weft_tensor_set *ref = weft_tensor_set_new();
    weft_err err = {0};
    CHECK(weft_safetensors_load_dir(TEST_DATA "fixtures/qwen3_5", ref, NULL, &err) == WEFT_OK);
    char dir[512], p[600];
    snprintf(dir, sizeof dir, "%s/sharded", tmp);
    mkdir(dir, 0755);
    json_t *wmap = json_object();
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
    size_t n1 = st_write_subset(p, ref, 2, 0, wmap, "model-00001-of-00002.safetensors");
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", dir);
    size_t n2 = st_write_subset(p, ref, 2, 1, wmap, "model-00002-of-00002.safetensors");
    CHECK(n1 > 0 && n2 > 0 && n1 + n2 == weft_tensor_set_count(ref));

    /* without an index: model*.safetensors, both shards */
    weft_tensor_set *s0 = weft_tensor_set_new();
    weft_safetensors_dir_info info;
    CHECK_MSG(weft_safetensors_load_dir(dir, s0, &info, &err) == WEFT_OK, "%s", err.msg);
    CHECK_EQ_INT(info.n_files, 2);
    CHECK(!info.sharded);
    CHECK_EQ_INT(weft_tensor_set_count(s0), weft_tensor_set_count(ref));
    weft_tensor_set_free(s0);

    json_t *index = json_pack("{s:{s:I}, s:O}", "metadata", "total_size",
                              (json_int_t)weft_tensor_set_bytes(ref), "weight_map", wmap);
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    json_dump_file(index, p, JSON_INDENT(1));
    weft_tensor_set *set = weft_tensor_set_new();
    CHECK_MSG(weft_safetensors_load_dir(dir, set, &info, &err) == WEFT_OK, "%s", err.msg);
    CHECK_EQ_INT(info.n_files, 2);
    CHECK(info.sharded);
    CHECK_EQ_INT(weft_tensor_set_count(set), weft_tensor_set_count(ref));
    int diff = 0;
    for (size_t i = 0; i < weft_tensor_set_count(ref); i++) {
        const weft_tensor *a = weft_tensor_set_at(ref, i), *b = weft_tensor_set_get(set, a->name);
        if (!b || b->dtype != a->dtype || b->ndim != a->ndim || b->nbytes != a->nbytes ||
            memcmp(a->shape, b->shape, sizeof a->shape) || memcmp(a->data, b->data, a->nbytes))
            diff++;
    }
    CHECK_EQ_INT(diff, 0);
    weft_tensor_set_free(set);

    /* weight_map names a tensor in the wrong shard */
    const char *moved = weft_tensor_set_at(ref, 0)->name; /* in shard 1 */
    json_object_set_new(json_object_get(index, "weight_map"), moved,
                        json_string("model-00002-of-00002.safetensors"));
    json_dump_file(index, p, 0);
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_dir(dir, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, moved) && strstr(err.msg, "weight_map says"), "%s", err.msg);
    weft_tensor_set_free(set);

    /* weight_map lacks a tensor a shard has */
    json_object_del(json_object_get(index, "weight_map"), moved);
    json_dump_file(index, p, 0);
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_dir(dir, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, moved) && strstr(err.msg, "not in weight_map"), "%s", err.msg);
    weft_tensor_set_free(set);

    /* weight_map lists a tensor no shard has */
    json_object_set_new(json_object_get(index, "weight_map"), moved,
                        json_string("model-00001-of-00002.safetensors"));
    json_object_set_new(json_object_get(index, "weight_map"), "model.ghost.weight",
                        json_string("model-00002-of-00002.safetensors"));
    json_dump_file(index, p, 0);
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_dir(dir, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "model.ghost.weight") && strstr(err.msg, "lacks"), "%s", err.msg);
    weft_tensor_set_free(set);

    /* index pointing at a missing shard */
    json_object_set_new(json_object_get(index, "weight_map"), "model.ghost.weight",
                        json_string("model-00003-of-00003.safetensors"));
    json_dump_file(index, p, 0);
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_dir(dir, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "model-00003-of-00003.safetensors") && strstr(err.msg, "missing"), "%s",
              err.msg);
    weft_tensor_set_free(set);

    /* a shard path escaping the directory */
    json_object_set_new(json_object_get(index, "weight_map"), "model.ghost.weight",
                        json_string("../x.safetensors"));
    json_dump_file(index, p, 0);
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_dir(dir, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "model.ghost.weight"), "%s", err.msg);
    weft_tensor_set_free(set);

    /* bad index JSON */
    FILE *f = fopen(p, "w");
    fputs("{\"weight_map\": {", f);
    fclose(f);
    set = weft_tensor_set_new();
    CHECK(weft_safetensors_load_dir(dir, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "index.json"), "%s", err.msg);
    weft_tensor_set_free(set);

    json_decref(index);
    json_decref(wmap);
    weft_tensor_set_free(ref);
}

typedef struct corrupt_case {
    const char *what;
    const char *header;
    size_t data_len;
    uint64_t hlen; /* 0: the header's length */
    weft_status want;
    const char *needle; /* the message names this (the tensor, or the problem) */
} corrupt_case;

static void check_corrupt(const char *tmp) {
    static const corrupt_case cases[] = {
        {"header length past EOF", "{}", 0, 1000, WEFT_EFORMAT, "past the end"},
        {"header length absurd", "{}", 0, (uint64_t)1 << 40, WEFT_EFORMAT, "cap"},
        {"bad JSON", "{\"a\": {\"dtype\": \"F32\",", 0, 0, WEFT_EFORMAT, "JSON"},
        {"not an object", "[1,2]", 0, 0, WEFT_EFORMAT, "not a JSON object"},
        {"offsets past EOF", "{\"w.x\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[16,32]}}", 16, 0,
         WEFT_EFORMAT, "w.x"},
        {"wrong dtype size", "{\"w.size\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,8]}}", 16, 0,
         WEFT_EFORMAT, "w.size"},
        {"overlap",
         "{\"w.a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
         "\"w.b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
         32, 0, WEFT_EFORMAT, "overlap"},
        {"F8 dtype", "{\"w.f8\":{\"dtype\":\"F8_E4M3\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0,
         WEFT_ENOTSUP, "w.f8"},
        {"unknown dtype", "{\"w.q\":{\"dtype\":\"Q9\",\"shape\":[4],\"data_offsets\":[0,4]}}", 4, 0,
         WEFT_EFORMAT, "w.q"},
        {"missing dtype", "{\"w.nd\":{\"shape\":[4],\"data_offsets\":[0,16]}}", 16, 0, WEFT_EFORMAT, "w.nd"},
        {"missing shape", "{\"w.ns\":{\"dtype\":\"F32\",\"data_offsets\":[0,16]}}", 16, 0, WEFT_EFORMAT,
         "w.ns"},
        {"missing offsets", "{\"w.no\":{\"dtype\":\"F32\",\"shape\":[4]}}", 16, 0, WEFT_EFORMAT, "w.no"},
        {"negative dim", "{\"w.neg\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", 16, 0,
         WEFT_EFORMAT, "w.neg"},
        {"end before begin", "{\"w.rev\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 16, 0,
         WEFT_EFORMAT, "w.rev"},
        {"shape overflow",
         "{\"w.big\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],\"data_offsets\":[0,0]}}", 0, 0,
         WEFT_EFORMAT, "w.big"},
        {"duplicate key",
         "{\"w.d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
         "\"w.d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, 0, WEFT_EFORMAT, "JSON"},
        {"metadata not strings", "{\"__metadata__\":{\"format\":1}}", 0, 0, WEFT_EFORMAT, "__metadata__"},
        {"entry not an object", "{\"w.e\":3}", 0, 0, WEFT_EFORMAT, "w.e"},
    };
    char path[600];
    uint8_t zeros[64] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const corrupt_case *c = &cases[i];
        snprintf(path, sizeof path, "%s/corrupt%zu.safetensors", tmp, i);
        st_write(path, c->header, zeros, c->data_len, c->hlen);
        weft_tensor_set *set = weft_tensor_set_new();
        weft_err err = {0};
        weft_status st = weft_safetensors_load_file(path, set, NULL, &err);
        if (getenv("WEFT_TEST_VERBOSE")) fprintf(stderr, "%-22s -> %s\n", c->what, err.msg);
        CHECK_MSG(st == c->want, "%s: status %d (%s), want %d", c->what, st, err.msg, c->want);
        CHECK_MSG(strstr(err.msg, c->needle) && strstr(err.msg, path), "%s: message \"%s\" lacks \"%s\"",
                  c->what, err.msg, c->needle);
        CHECK_EQ_INT(weft_tensor_set_count(set), 0);
        weft_tensor_set_free(set);
    }

    /* truncated files: a valid fixture cut in its data section, in its header, and below 8 bytes */
    FILE *f = fopen(TEST_DATA "fixtures/llama/model.safetensors", "rb");
    static uint8_t buf[300000];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    const size_t cuts[] = {n / 2, 1000, 5};
    const char *needles[] = {"past the data section", "past the end", "too short"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/trunc%d.safetensors", tmp, i);
        f = fopen(path, "wb");
        fwrite(buf, 1, cuts[i], f);
        fclose(f);
        weft_tensor_set *set = weft_tensor_set_new();
        weft_err err = {0};
        CHECK_EQ_INT(weft_safetensors_load_file(path, set, NULL, &err), WEFT_EFORMAT);
        CHECK_MSG(strstr(err.msg, needles[i]) && strstr(err.msg, path), "truncated %zu: %s", cuts[i],
                  err.msg);
        weft_tensor_set_free(set);
    }

    /* a name loaded twice (two shards both holding it) */
    weft_tensor_set *set = weft_tensor_set_new();
    weft_err err = {0};
    const char *ok = "{\"w.dup\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
    snprintf(path, sizeof path, "%s/dup.safetensors", tmp);
    st_write(path, ok, zeros, 4, 0);
    CHECK(weft_safetensors_load_file(path, set, NULL, &err) == WEFT_OK);
    CHECK(weft_safetensors_load_file(path, set, NULL, &err) == WEFT_EFORMAT);
    CHECK_MSG(strstr(err.msg, "w.dup"), "%s", err.msg);
    weft_tensor_set_free(set);

    /* scalars and zero-size tensors are fine; a scalar is [1]; holes between tensors are allowed */
    const char *odd =
        "{\"__metadata__\":{\"format\":\"mlx\"},\"s\":{\"dtype\":\"I64\",\"shape\":[],"
        "\"data_offsets\":[0,8]},\"z\":{\"dtype\":\"BF16\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
        "\"b\":{\"dtype\":\"BOOL\",\"shape\":[2],\"data_offsets\":[12,14]}}   ";
    snprintf(path, sizeof path, "%s/odd.safetensors", tmp);
    st_write(path, odd, zeros, 16, 0);
    set = weft_tensor_set_new();
    bool mlx = false;
    CHECK_MSG(weft_safetensors_load_file(path, set, &mlx, &err) == WEFT_OK, "%s", err.msg);
    CHECK(mlx);
    const weft_tensor *s = weft_tensor_set_get(set, "s"), *z = weft_tensor_set_get(set, "z");
    CHECK(s && s->ndim == 1 && s->shape[0] == 1 && s->dtype == WEFT_DT_I64 && s->nbytes == 8);
    CHECK(z && z->ndim == 2 && z->shape[0] == 0 && z->nbytes == 0);
    weft_tensor_set_free(set);

    /* unreadable paths */
    set = weft_tensor_set_new();
    CHECK_EQ_INT(weft_safetensors_load_file("/nonexistent/x.safetensors", set, NULL, &err), WEFT_EIO);
    CHECK(strstr(err.msg, "/nonexistent/x.safetensors") != NULL);
    CHECK_EQ_INT(weft_safetensors_load_dir("/nonexistent", set, NULL, &err), WEFT_EIO);
    char empty[600];
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    mkdir(empty, 0755);
    CHECK_EQ_INT(weft_safetensors_load_dir(empty, set, NULL, &err), WEFT_EIO);
    CHECK(strstr(err.msg, "no .safetensors") != NULL);
    weft_tensor_set_free(set);
}

static void check_memory(void) {
    weft_err err = {0};
    CHECK(weft_mem_available() > 0);
    CHECK_EQ_INT(weft_check_memory(1, "tiny", &err), WEFT_OK);
    CHECK_EQ_INT(weft_check_memory(SIZE_MAX / 2, "weights of huge", &err), WEFT_ENOMEM);
    CHECK(strstr(err.msg, "weights of huge") && strstr(err.msg, "MiB"));
    CHECK_EQ_INT(weft_check_memory_against(300u << 20, 200u << 20, "model X", &err), WEFT_ENOMEM);
    CHECK_MSG(strstr(err.msg, "300.0 MiB") && strstr(err.msg, "200.0 MiB") && strstr(err.msg, "model X"),
              "%s", err.msg);
    CHECK_EQ_INT(weft_check_memory_against(200u << 20, 200u << 20, "model X", &err), WEFT_OK);
}

int main(void) {
    for (size_t i = 0; i < ST_N_FIXTURES; i++) check_against_keys(ST_FIXTURES[i]);
    check_bytes_against_file();
    char tmp[] = "/tmp/weft_st_XXXXXX";
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    check_sharded(tmp);
    check_corrupt(tmp);
    st_rmtree(tmp);
    check_memory();
    return check_report("test_safetensors");
}
