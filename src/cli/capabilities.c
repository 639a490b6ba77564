/* weft capabilities --json (SPEC §2.2): what this build supports, from the same flag table as the parser. */
#include "cli.h"

#include <jansson.h>
#include <stdlib.h>

int cmd_capabilities(const cli_options *o) {
    json_t *root = json_object();
    json_object_set_new(root, "schema", json_integer(1));
    json_object_set_new(root, "version", json_string("0.1.0"));
    json_t *backends = json_array();
    json_array_append_new(backends, json_string("cpu"));
    json_object_set_new(root, "backends", backends);
    json_object_set_new(root, "devices", json_array());
    json_t *fam = json_object();
    const char *dense[] = {"llama", "qwen3"};
    for (int i = 0; i < 2; i++) {
        json_t *f = json_array();
        json_array_append_new(f, json_string("safetensors"));
        json_array_append_new(f, json_string("mlx-affine"));
        json_array_append_new(f, json_string("gguf"));
        json_object_set_new(fam, dense[i], f);
    }
    json_object_set_new(root, "families", fam);
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
    json_object_set_new(root, "env", env);
    char *s = json_dumps(root, o->json ? JSON_COMPACT : JSON_INDENT(2));
    puts(s ? s : "{}");
    free(s);
    json_decref(root);
    return 0;
}
