/* weft capabilities --json (SPEC §2.2): what this build supports, from the same flag table as the parser. */
#include "cli.h"
#include "weft/config.h"
#ifdef WEFT_HAVE_CUDA
#include "weft/cuda_backend.h"
#endif

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* The CUDA devices this process sees, as SPEC §2.2 lists them (none without a CUDA build or a device). */
static json_t *devices(void) {
    json_t *list = json_array();
#ifdef WEFT_HAVE_CUDA
    for (int i = 0; i < weft_cuda_device_count(); i++) {
        char name[256], chip[32];
        int major = 0, minor = 0;
        size_t mem = 0;
        if (weft_cuda_device_info(i, name, sizeof name, &major, &minor, &mem)) continue;
        snprintf(chip, sizeof chip, "nvidia-sm%d%d", major, minor);
        json_t *d = json_object();
        json_object_set_new(d, "backend", json_string("cuda"));
        json_object_set_new(d, "index", json_integer(i));
        json_object_set_new(d, "name", json_string(name));
        json_object_set_new(d, "chip", json_string(chip));
        json_object_set_new(d, "memory_bytes", json_integer((json_int_t)mem));
        json_array_append_new(list, d);
    }
#endif
    return list;
}

int cmd_capabilities(const cli_options *o) {
    if (o->model) {
        fprintf(stderr, "weft capabilities: unexpected argument '%s' (it takes only --json)\n", o->model);
        return 2;
    }
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_integer(1));
    json_object_set_new(root, "version", json_string("0.1.0"));
    json_t *backends = json_array();
    json_array_append_new(backends, json_string("cpu"));
#ifdef WEFT_HAVE_CUDA
    json_array_append_new(backends, json_string("cuda")); /* llama and qwen3 (see "cuda_families") */
#endif
    json_object_set_new(root, "backends", backends);
    json_object_set_new(root, "devices", devices());
    /* every family loads from all three formats on the CPU backend (tests/data: fixtures, gguf_hybrid) */
    json_t *fam = json_object();
    for (int f = WEFT_FAMILY_LLAMA; f <= WEFT_FAMILY_NEMOTRON_H; f++) {
        json_t *fmts = json_array();
        json_array_append_new(fmts, json_string("safetensors"));
        json_array_append_new(fmts, json_string("mlx-affine"));
        json_array_append_new(fmts, json_string("gguf"));
        json_object_set_new(fam, weft_family_name((weft_family)f), fmts);
    }
    json_object_set_new(root, "families", fam);
#ifdef WEFT_HAVE_CUDA
    json_t *cf = json_array();
    json_array_append_new(cf, json_string(weft_family_name(WEFT_FAMILY_LLAMA)));
    json_array_append_new(cf, json_string(weft_family_name(WEFT_FAMILY_QWEN3)));
    json_object_set_new(root, "cuda_families", cf);
    /* --activations: fp32 everywhere; f16 on the CUDA backend for Q4_0 weights (README, "On an NVIDIA GPU")
     */
    json_t *acts = json_array();
    json_array_append_new(acts, json_string("fp32"));
    json_array_append_new(acts, json_string("f16"));
    json_object_set_new(root, "cuda_activations", acts);
#endif
    json_t *formats = json_object();
    json_t *st = json_array(), *mlx = json_array(), *gguf = json_array();
    const char *st_types[] = {"F32", "F16", "BF16"};
    for (int i = 0; i < 3; i++) json_array_append_new(st, json_string(st_types[i]));
    const char *mlx_bits[] = {"2", "3", "4", "5", "6", "8"};
    for (int i = 0; i < 6; i++) json_array_append_new(mlx, json_string(mlx_bits[i]));
    const char *gguf_types[] = {"F32",  "F16",  "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                "Q8_0", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"};
    for (int i = 0; i < 13; i++) json_array_append_new(gguf, json_string(gguf_types[i]));
    json_object_set_new(formats, "safetensors", st);
    json_object_set_new(formats, "mlx-affine-bits", mlx);
    json_object_set_new(formats, "gguf", gguf);
    json_object_set_new(root, "formats", formats);
    json_t *flags = json_array();
    for (int k = 0; k < weft_cli_n_flags; k++) {
        if (!(weft_cli_flags[k].commands & CMD_SERVE)) continue;
        json_array_append_new(flags, json_string(weft_cli_flags[k].name));
    }
    json_t *serve = json_object();
    json_object_set_new(serve, "flags", flags);
    json_object_set_new(root, "serve", serve);
    json_t *env = json_array();
    json_array_append_new(env, json_string("WEFT_API_KEY"));
    json_array_append_new(env, json_string("WEFT_NO_LIVE"));
#ifdef WEFT_HAVE_CUDA /* measurement knobs of the CUDA backend (same bits; see src/backend/cuda) */
    json_array_append_new(env, json_string("WEFT_CUDA_BASELINE"));
    json_array_append_new(env, json_string("WEFT_CUDA_NO_PDL"));
    json_array_append_new(env, json_string("WEFT_CUDA_TIMING_TWICE"));
#endif
    json_object_set_new(root, "env", env);
    char *s = json_dumps(root, o->json ? JSON_COMPACT : JSON_INDENT(2));
    puts(s ? s : "{}");
    free(s);
    json_decref(root);
    return 0;
}
