/* config.json reader: every fixture family (HF and MLX copies), both config generations (rope_parameters vs
 * rope_theta/rope_scaling), layer patterns, eos merging, generation defaults, and named errors. */
#include "test_safetensors_util.h"
#include "weft/config.h"

#include <math.h>

static weft_config CFG; /* large (layer table): static rather than on the stack */

static bool load(const char *fixture) {
    char dir[512];
    st_fixture_path(dir, sizeof dir, fixture, NULL);
    weft_err err = {0};
    weft_status st = weft_config_load_dir(dir, &CFG, &err);
    CHECK_MSG(st == WEFT_OK, "%s: %s", fixture, err.msg);
    return st == WEFT_OK;
}

static void check_kinds(const char *what, const weft_layer_kind *want, int n) {
    CHECK_MSG(CFG.n_layers == n, "%s: %lld layers", what, (long long)CFG.n_layers);
    for (int i = 0; i < n; i++)
        CHECK_MSG(CFG.layer_kind[i] == want[i], "%s: layer %d kind %d", what, i, CFG.layer_kind[i]);
}

static void check_llama(const char *fx) {
    if (!load(fx)) return;
    CHECK_EQ_INT(CFG.family, WEFT_FAMILY_LLAMA);
    CHECK_STR(CFG.model_type, "llama");
    CHECK(CFG.vocab_size == 512 && CFG.hidden_size == 64 && CFG.intermediate_size == 128);
    CHECK(CFG.n_heads == 4 && CFG.n_kv_heads == 2 && CFG.head_dim == 16);
    CHECK(CFG.rms_norm_eps == 1e-5 && !CFG.tie_word_embeddings && !CFG.attention_bias && !CFG.mlp_bias);
    CHECK(CFG.max_position_embeddings == 2048 && CFG.bos_token_id == 1 && CFG.pad_token_id == -1);
    CHECK(CFG.n_eos == 1 && CFG.eos_token_ids[0] == 2);
    CHECK(CFG.rope.type == WEFT_ROPE_DEFAULT && CFG.rope.theta == 10000.0 &&
          CFG.rope.partial_rotary_factor == 1.0);
    CHECK(!CFG.rope.adjacent_pairs && CFG.rope.freq_divisors == NULL);
    CHECK(!CFG.has_temperature && !CFG.has_top_p && !CFG.has_top_k && !CFG.has_min_p);
    CHECK(CFG.temperature == 1.0 && CFG.top_p == 1.0 && CFG.top_k == 0 && CFG.min_p == 0.0);
    const weft_layer_kind k[] = {WEFT_LAYER_ATTENTION, WEFT_LAYER_ATTENTION};
    check_kinds(fx, k, 2);
    CHECK(CFG.num_experts == 0 && CFG.mamba_num_heads == 0);
}

static void check_qwen3(const char *fx) {
    if (!load(fx)) return;
    CHECK_EQ_INT(CFG.family, WEFT_FAMILY_QWEN3);
    CHECK(CFG.vocab_size == 1024 && CFG.hidden_size == 64 && CFG.head_dim == 32 && CFG.n_heads == 4);
    CHECK(CFG.n_kv_heads == 2 && CFG.tie_word_embeddings && CFG.rms_norm_eps == 1e-6);
    CHECK(CFG.rope.theta == 1e6 && CFG.rope.type == WEFT_ROPE_DEFAULT && CFG.max_position_embeddings == 4096);
    CHECK(CFG.n_eos == 0 && CFG.bos_token_id == -1);
    const weft_layer_kind k[] = {WEFT_LAYER_ATTENTION, WEFT_LAYER_ATTENTION};
    check_kinds(fx, k, 2);
}

static void check_qwen35(const char *fx, bool moe, bool mlx) {
    if (!load(fx)) return;
    CHECK_EQ_INT(CFG.family, moe ? WEFT_FAMILY_QWEN3_5_MOE : WEFT_FAMILY_QWEN3_5);
    CHECK_STR(CFG.model_type, moe ? "qwen3_5_moe" : "qwen3_5");
    CHECK(CFG.vocab_size == 1024 && CFG.hidden_size == 64 && CFG.head_dim == 32 && CFG.n_heads == 4);
    CHECK(CFG.n_kv_heads == 2 && !CFG.tie_word_embeddings && CFG.rms_norm_eps == 1e-6);
    CHECK(CFG.rope.type == WEFT_ROPE_DEFAULT && CFG.rope.theta == 1e7 &&
          CFG.rope.partial_rotary_factor == 0.25);
    CHECK(CFG.attn_output_gate && CFG.linear_conv_kernel_dim == 4 && CFG.linear_key_head_dim == 16);
    CHECK(CFG.linear_value_head_dim == 16 && CFG.linear_num_key_heads == 2 &&
          CFG.linear_num_value_heads == 4);
    CHECK(CFG.full_attention_interval == 4);
    CHECK_EQ_INT(CFG.mtp_num_hidden_layers, mlx ? 0 : 1); /* mlx-lm drops the MTP head and its key */
    const weft_layer_kind k[] = {WEFT_LAYER_LINEAR, WEFT_LAYER_LINEAR, WEFT_LAYER_LINEAR,
                                 WEFT_LAYER_ATTENTION};
    check_kinds(fx, k, 4);
    if (moe) {
        CHECK(CFG.num_experts == 8 && CFG.num_experts_per_tok == 2 && CFG.moe_intermediate_size == 64);
        CHECK(CFG.shared_expert_intermediate_size == 64 && CFG.norm_topk_prob && CFG.n_shared_experts == 1);
        CHECK(CFG.intermediate_size == 0);
    } else {
        CHECK(CFG.intermediate_size == 128 && CFG.num_experts == 0);
    }
}

static void check_nemotron(const char *fx, bool moe, bool mlx) {
    if (!load(fx)) return;
    CHECK_EQ_INT(CFG.family, WEFT_FAMILY_NEMOTRON_H);
    CHECK(CFG.vocab_size == 1024 && CFG.hidden_size == 64 && CFG.n_heads == 4 && CFG.n_kv_heads == 2);
    CHECK(CFG.head_dim == 16 && CFG.rms_norm_eps == 1e-5 && !CFG.tie_word_embeddings);
    CHECK(CFG.rope.type == WEFT_ROPE_NONE);
    CHECK(CFG.bos_token_id == 1 && CFG.pad_token_id == 0 && CFG.n_eos == 1 && CFG.eos_token_ids[0] == 2);
    CHECK(CFG.mamba_num_heads == 4 && CFG.mamba_head_dim == 16 && CFG.ssm_state_size == 16);
    CHECK(CFG.n_groups == 2 && CFG.n_group == 1 && CFG.topk_group == 1 && CFG.conv_kernel == 4);
    CHECK(CFG.use_conv_bias && CFG.time_step_limit_min == 0.0 && isinf(CFG.time_step_limit_max) &&
          CFG.time_step_limit_max > 0);
    CHECK(CFG.intermediate_size == 128 && CFG.moe_latent_size == 0 && CFG.norm_topk_prob);
    CHECK(CFG.num_experts == 8 && CFG.num_experts_per_tok == 2 && CFG.n_shared_experts == 1);
    CHECK_EQ_INT(CFG.num_nextn_predict_layers, moe && !mlx ? 1 : 0);
    if (moe) {
        CHECK(CFG.moe_intermediate_size == 64 && CFG.shared_expert_intermediate_size == 64);
        CHECK(CFG.routed_scaling_factor == 2.5);
        const weft_layer_kind k[] = {WEFT_LAYER_LINEAR, WEFT_LAYER_MOE, WEFT_LAYER_ATTENTION, WEFT_LAYER_MOE};
        check_kinds(fx, k, 4);
    } else {
        CHECK(CFG.moe_intermediate_size == 7688 && CFG.routed_scaling_factor == 1.0);
        const weft_layer_kind k[] = {WEFT_LAYER_LINEAR, WEFT_LAYER_MLP, WEFT_LAYER_ATTENTION, WEFT_LAYER_MLP};
        check_kinds(fx, k, 4);
    }
}

static weft_status parse(const char *cj, const char *gj, weft_err *err) {
    memset(err, 0, sizeof *err);
    weft_status st = weft_config_parse(cj, gj, &CFG, err);
    if (getenv("WEFT_TEST_VERBOSE") && st) fprintf(stderr, "-> %s\n", err->msg);
    return st;
}

#define LLAMA_SIZES                                                                                          \
    "\"vocab_size\":32000,\"hidden_size\":4096,\"intermediate_size\":14336,\"num_hidden_layers\":32,"        \
    "\"num_attention_heads\":32"

static void check_legacy_and_v5(void) {
    weft_err err;
    /* Llama 3.1 as the hub ships it: rope_theta + rope_scaling (rope_type llama3), eos list, generation
     * config */
    const char *l31 =
        "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"num_key_value_heads\":8,\"rope_theta\":500000.0,"
        "\"rope_scaling\":{\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
        "\"original_max_position_embeddings\":8192,\"rope_type\":\"llama3\"},"
        "\"max_position_embeddings\":131072,\"bos_token_id\":128000,"
        "\"eos_token_id\":[128001,128008,128009]}";
    const char *gen =
        "{\"eos_token_id\":[128009,128001,128010],\"temperature\":0.6,\"top_p\":0.9,\"top_k\":20,"
        "\"min_p\":0,\"do_sample\":true}";
    CHECK(parse(l31, gen, &err) == WEFT_OK);
    CHECK(CFG.rope.type == WEFT_ROPE_LLAMA3 && CFG.rope.theta == 500000.0 && CFG.rope.factor == 8.0);
    CHECK(CFG.rope.low_freq_factor == 1.0 && CFG.rope.high_freq_factor == 4.0);
    CHECK(CFG.rope.original_max_position_embeddings == 8192);
    CHECK(CFG.head_dim == 128 && CFG.n_kv_heads == 8 && CFG.rms_norm_eps == 1e-6 && CFG.n_layers == 32);
    CHECK(CFG.n_eos == 4 && CFG.eos_token_ids[0] == 128001 && CFG.eos_token_ids[1] == 128008 &&
          CFG.eos_token_ids[2] == 128009 && CFG.eos_token_ids[3] == 128010);
    CHECK(CFG.has_temperature && CFG.temperature == 0.6 && CFG.has_top_p && CFG.top_p == 0.9);
    CHECK(CFG.has_top_k && CFG.top_k == 20 && CFG.has_min_p && CFG.min_p == 0.0);

    /* the same in transformers 5 spelling */
    const char *v5 =
        "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"rope_parameters\":{\"rope_type\":\"llama3\","
        "\"rope_theta\":500000.0,\"factor\":8.0,\"low_freq_factor\":1.0,\"high_freq_factor\":4.0,"
        "\"original_max_position_embeddings\":8192},\"eos_token_id\":2}";
    CHECK(parse(v5, "{\"eos_token_id\":2}", &err) == WEFT_OK);
    CHECK(CFG.rope.type == WEFT_ROPE_LLAMA3 && CFG.rope.theta == 500000.0 && CFG.rope.factor == 8.0);
    CHECK(CFG.n_eos == 1 && CFG.n_kv_heads == 32 && !CFG.has_temperature);

    /* legacy `type` spelling, linear */
    const char *lin =
        "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2}}";
    CHECK(parse(lin, NULL, &err) == WEFT_OK);
    CHECK(CFG.rope.type == WEFT_ROPE_LINEAR && CFG.rope.factor == 2.0 && CFG.rope.theta == 10000.0);
    CHECK(CFG.max_position_embeddings == 2048);

    /* yarn (qwen3 long context), defaults for beta and N0; qwen3 head_dim default 128 */
    const char *yarn = "{\"model_type\":\"qwen3\",\"vocab_size\":151936,\"hidden_size\":2560,"
                       "\"intermediate_size\":9728,\"num_hidden_layers\":36,\"num_attention_heads\":32,"
                       "\"num_key_value_heads\":8,\"rope_theta\":1000000,\"max_position_embeddings\":40960,"
                       "\"rope_scaling\":{\"rope_type\":\"yarn\",\"factor\":4.0}}";
    CHECK(parse(yarn, NULL, &err) == WEFT_OK);
    CHECK(CFG.rope.type == WEFT_ROPE_YARN && CFG.rope.factor == 4.0 && CFG.rope.theta == 1e6);
    CHECK(CFG.rope.beta_fast == 32.0 && CFG.rope.beta_slow == 1.0 && CFG.rope.attention_factor == 0.0);
    CHECK(CFG.rope.original_max_position_embeddings == 40960 && CFG.head_dim == 128);
    /* rope_scaling null is the default rope */
    CHECK(parse("{\"model_type\":\"qwen3\",\"vocab_size\":8,\"hidden_size\":64,\"intermediate_size\":8,"
                "\"num_hidden_layers\":1,\"num_attention_heads\":4,\"rope_scaling\":null}",
                NULL, &err) == WEFT_OK);
    CHECK(CFG.rope.type == WEFT_ROPE_DEFAULT && CFG.rope.theta == 10000.0 && !CFG.tie_word_embeddings);
}

static void check_patterns(void) {
    weft_err err;
    /* flattened qwen3_5 (no text_config), no layer_types: every 4th layer is attention; partial rotary 0.25
     */
    const char *q35 =
        "{\"model_type\":\"qwen3_5\",\"vocab_size\":248320,\"hidden_size\":1024,\"intermediate_size\":3584,"
        "\"num_hidden_layers\":8,\"num_attention_heads\":8,\"num_key_value_heads\":2,"
        "\"linear_num_key_heads\":16,\"linear_num_value_heads\":16,\"rope_theta\":10000000}";
    CHECK(parse(q35, NULL, &err) == WEFT_OK);
    const weft_layer_kind k8[] = {WEFT_LAYER_LINEAR,    WEFT_LAYER_LINEAR,   WEFT_LAYER_LINEAR,
                                  WEFT_LAYER_ATTENTION, WEFT_LAYER_LINEAR,   WEFT_LAYER_LINEAR,
                                  WEFT_LAYER_LINEAR,    WEFT_LAYER_ATTENTION};
    check_kinds("qwen3_5 interval", k8, 8);
    CHECK(CFG.rope.partial_rotary_factor == 0.25 && CFG.head_dim == 256 && CFG.attn_output_gate);
    CHECK(CFG.linear_key_head_dim == 128 && CFG.linear_value_head_dim == 128 && CFG.rope.theta == 1e7);

    /* nemotron_h legacy: hybrid_override_pattern, mamba_n_groups, mamba_d_conv, attention_head_dim, Infinity
     */
    const char *nh =
        "{\"model_type\":\"nemotron_h\",\"vocab_size\":131072,\"hidden_size\":4096,"
        "\"intermediate_size\":21504,\"num_attention_heads\":32,\"num_key_value_heads\":8,"
        "\"attention_head_dim\":128,\"hybrid_override_pattern\":\"M-M*-E\",\"mamba_num_heads\":128,"
        "\"mamba_head_dim\":64,\"ssm_state_size\":128,\"mamba_n_groups\":8,\"mamba_d_conv\":4,"
        "\"n_routed_experts\":128,\"num_experts_per_tok\":6,\"moe_intermediate_size\":1856,"
        "\"moe_latent_size\":1024,\"time_step_limit\":[{\"__float__\":\"-Infinity\"},"
        "{\"__float__\":\"Infinity\"}],\"layer_norm_epsilon\":1e-5,\"eos_token_id\":[2,11]}";
    CHECK(parse(nh, "{\"eos_token_id\":11,\"temperature\":1.0}", &err) == WEFT_OK);
    const weft_layer_kind k6[] = {WEFT_LAYER_LINEAR,    WEFT_LAYER_MLP, WEFT_LAYER_LINEAR,
                                  WEFT_LAYER_ATTENTION, WEFT_LAYER_MLP, WEFT_LAYER_MOE};
    check_kinds("nemotron pattern", k6, 6);
    CHECK(CFG.head_dim == 128 && CFG.n_groups == 8 && CFG.conv_kernel == 4 && CFG.moe_latent_size == 1024);
    CHECK(isinf(CFG.time_step_limit_min) && CFG.time_step_limit_min < 0 && isinf(CFG.time_step_limit_max));
    CHECK(CFG.n_eos == 2 && CFG.eos_token_ids[1] == 11 && CFG.has_temperature &&
          CFG.rope.type == WEFT_ROPE_NONE);
    CHECK(CFG.num_experts == 128 && CFG.num_experts_per_tok == 6 && CFG.n_group == 1 &&
          CFG.n_shared_experts == 1);
}

/* Python's json.dumps writes bare Infinity/NaN; older nemotron_h configs carry them. */
static void check_nonfinite(void) {
    char *t = weft_json_nonfinite_dup("{\"a\":[0.0, Infinity, -Infinity, NaN],\"s\":\"NaN \\\" Infinity\","
                                      "\"NaNa\":1}");
    CHECK_STR(t, "{\"a\":[0.0, {\"__float__\":\"Infinity\"}, {\"__float__\":\"-Infinity\"}, "
                 "{\"__float__\":\"NaN\"}],\"s\":\"NaN \\\" Infinity\",\"NaNa\":1}");
    free(t);
    weft_err err;
    const char *nh =
        "{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,\"num_attention_heads\":4,"
        "\"layers_block_type\":[\"attention\"],\"time_step_limit\":[0.0, Infinity]}";
    CHECK(parse(nh, NULL, &err) == WEFT_OK);
    CHECK(CFG.time_step_limit_min == 0.0 && isinf(CFG.time_step_limit_max) && CFG.time_step_limit_max > 0);
}

static void fails(const char *what, const char *cj, const char *gj, weft_status want, const char *needle) {
    weft_err err;
    weft_status st = parse(cj, gj, &err);
    CHECK_MSG(st == want, "%s: status %d (%s), want %d", what, st, err.msg, want);
    CHECK_MSG(strstr(err.msg, needle) != NULL, "%s: \"%s\" lacks \"%s\"", what, err.msg, needle);
}

static void check_errors(void) {
    fails("missing hidden_size",
          "{\"model_type\":\"llama\",\"vocab_size\":8,\"intermediate_size\":8,\"num_hidden_layers\":1,"
          "\"num_attention_heads\":4}",
          NULL, WEFT_EFORMAT, "hidden_size");
    fails("bad model_type", "{\"model_type\":\"gpt2\"," LLAMA_SIZES "}", NULL, WEFT_ENOTSUP, "gpt2");
    fails("missing model_type", "{" LLAMA_SIZES "}", NULL, WEFT_EFORMAT, "model_type");
    fails("model_type number", "{\"model_type\":3," LLAMA_SIZES "}", NULL, WEFT_EFORMAT, "model_type");
    fails("hidden_size string",
          "{\"model_type\":\"llama\",\"vocab_size\":8,\"hidden_size\":\"64\",\"intermediate_size\":8,"
          "\"num_hidden_layers\":1,\"num_attention_heads\":4}",
          NULL, WEFT_EFORMAT, "hidden_size");
    fails("hidden_size fraction", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"hidden_size\":64.5}", NULL,
          WEFT_EFORMAT, "hidden_size");
    fails("tie string", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"tie_word_embeddings\":\"yes\"}", NULL,
          WEFT_EFORMAT, "tie_word_embeddings");
    fails("eps string", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"rms_norm_eps\":\"1e-5\"}", NULL,
          WEFT_EFORMAT, "rms_norm_eps");
    fails("negative heads", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"num_key_value_heads\":-1}", NULL,
          WEFT_EFORMAT, "num_key_value_heads");
    fails("gqa ratio", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"num_key_value_heads\":5}", NULL,
          WEFT_EFORMAT, "num_key_value_heads");
    fails("eos negative", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"eos_token_id\":-1}", NULL,
          WEFT_EFORMAT, "eos_token_id");
    fails("eos in list", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"eos_token_id\":[1,\"x\"]}", NULL,
          WEFT_EFORMAT, "eos_token_id");
    fails("dynamic rope",
          "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"rope_scaling\":{\"type\":\"dynamic\",\"factor\":2}}",
          NULL, WEFT_ENOTSUP, "dynamic");
    fails("llama3 missing key",
          "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8,"
          "\"high_freq_factor\":4,\"original_max_position_embeddings\":8192}}",
          NULL, WEFT_EFORMAT, "low_freq_factor");
    fails("rope factor string",
          "{\"model_type\":\"llama\"," LLAMA_SIZES
          ",\"rope_scaling\":{\"rope_type\":\"linear\",\"factor\":\"2\"}}",
          NULL, WEFT_EFORMAT, "factor");
    fails("sliding window", "{\"model_type\":\"qwen3\"," LLAMA_SIZES ",\"use_sliding_window\":true}", NULL,
          WEFT_ENOTSUP, "use_sliding_window");
    fails("bad json", "{\"model_type\": \"llama\",", NULL, WEFT_EFORMAT, "config.json");
    fails("bad generation json", "{\"model_type\":\"llama\"," LLAMA_SIZES "}", "{", WEFT_EFORMAT,
          "generation_config.json");
    fails("generation temperature string", "{\"model_type\":\"llama\"," LLAMA_SIZES "}",
          "{\"temperature\":\"hot\"}", WEFT_EFORMAT, "temperature");
    fails("layer_types length",
          "{\"model_type\":\"qwen3_5\",\"text_config\":{" LLAMA_SIZES ",\"num_hidden_layers\":2,"
          "\"linear_num_key_heads\":2,\"linear_num_value_heads\":2,\"layer_types\":[\"full_attention\"]}}",
          NULL, WEFT_EFORMAT, "layer_types");
    fails("layer_types name",
          "{\"model_type\":\"qwen3_5\",\"text_config\":{" LLAMA_SIZES ",\"num_hidden_layers\":1,"
          "\"linear_num_key_heads\":2,\"linear_num_value_heads\":2,\"layer_types\":[\"sliding\"]}}",
          NULL, WEFT_EFORMAT, "sliding");
    fails("qwen3_5 missing linear heads",
          "{\"model_type\":\"qwen3_5\",\"text_config\":{" LLAMA_SIZES ",\"num_hidden_layers\":4}}", NULL,
          WEFT_EFORMAT, "linear_num_key_heads");
    fails("qwen3_5_moe missing experts",
          "{\"model_type\":\"qwen3_5_moe\",\"text_config\":{" LLAMA_SIZES ",\"num_hidden_layers\":4,"
          "\"linear_num_key_heads\":2,\"linear_num_value_heads\":2}}",
          NULL, WEFT_EFORMAT, "num_experts");
    fails("nemotron unknown block",
          "{\"model_type\":\"nemotron_h\"," LLAMA_SIZES ",\"hybrid_override_pattern\":\"M*X\"}", NULL,
          WEFT_EFORMAT, "\"X\"");
    fails("nemotron no pattern",
          "{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,"
          "\"num_attention_heads\":4}",
          NULL, WEFT_EFORMAT, "layers_block_type");
    fails("nemotron pattern vs num_hidden_layers",
          "{\"model_type\":\"nemotron_h\"," LLAMA_SIZES ",\"layers_block_type\":[\"attention\",\"mlp\"]}",
          NULL, WEFT_EFORMAT, "num_hidden_layers");
    fails("nemotron moe missing experts",
          "{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,\"num_attention_heads\":4,"
          "\"layers_block_type\":[\"attention\",\"moe\"]}",
          NULL, WEFT_EFORMAT, "n_routed_experts");
    fails("time_step_limit",
          "{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,"
          "\"num_attention_heads\":4,\"layers_block_type\":[\"attention\"],\"time_step_limit\":[0,{\"__float_"
          "_\":\"big\"}]}",
          NULL, WEFT_EFORMAT, "time_step_limit");
    fails("llama gelu", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"hidden_act\":\"gelu_pytorch_tanh\"}",
          NULL, WEFT_ENOTSUP, "hidden_act \"gelu_pytorch_tanh\"");
    fails("qwen3 act not a string", "{\"model_type\":\"qwen3\"," LLAMA_SIZES ",\"hidden_act\":1}", NULL,
          WEFT_ENOTSUP, "hidden_act");
    fails("qwen3_5 text gelu",
          "{\"model_type\":\"qwen3_5\",\"text_config\":{" LLAMA_SIZES ",\"num_hidden_layers\":1,"
          "\"linear_num_key_heads\":2,\"linear_num_value_heads\":2,\"hidden_act\":\"gelu\"}}",
          NULL, WEFT_ENOTSUP, "hidden_act");
    fails("nemotron mlp act",
          "{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,\"num_attention_heads\":4,"
          "\"layers_block_type\":[\"attention\"],\"mlp_hidden_act\":\"silu\"}",
          NULL, WEFT_ENOTSUP, "mlp_hidden_act");
    fails("nemotron mamba act",
          "{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,\"num_attention_heads\":4,"
          "\"layers_block_type\":[\"attention\"],\"mamba_hidden_act\":\"relu\"}",
          NULL, WEFT_ENOTSUP, "mamba_hidden_act");
    {
        /* only the text model's activation counts: a vision tower's gelu is not the text MLP's */
        weft_err e2;
        CHECK(parse("{\"model_type\":\"qwen3_5\",\"vision_config\":{\"hidden_act\":\"gelu_pytorch_tanh\"},"
                    "\"text_config\":{" LLAMA_SIZES ",\"num_hidden_layers\":1,\"linear_num_key_heads\":2,"
                    "\"linear_num_value_heads\":2,\"hidden_act\":\"silu\"}}",
                    NULL, &e2) == WEFT_OK);
        CHECK(parse("{\"model_type\":\"llama\"," LLAMA_SIZES ",\"hidden_act\":\"swish\"}", NULL, &e2) ==
              WEFT_OK);
        CHECK(
            parse("{\"model_type\":\"nemotron_h\",\"vocab_size\":8,\"hidden_size\":64,\"num_attention_"
                  "heads\":4,"
                  "\"layers_block_type\":[\"attention\"],\"mlp_hidden_act\":\"relu2\",\"hidden_act\":\"x\"}",
                  NULL, &e2) == WEFT_OK);
    }
    fails("too many layers", "{\"model_type\":\"llama\"," LLAMA_SIZES ",\"num_hidden_layers\":5000}", NULL,
          WEFT_ENOTSUP, "5000");

    weft_err err;
    CHECK_EQ_INT(weft_config_load_dir("/nonexistent-dir", &CFG, &err), WEFT_EIO);
    CHECK(strstr(err.msg, "/nonexistent-dir/config.json") != NULL);
}

int main(void) {
    check_llama("llama");
    check_llama("llama-mlx-q4g64");
    check_qwen3("qwen3");
    check_qwen3("qwen3-mlx-q4g64");
    check_qwen35("qwen3_5", false, false);
    check_qwen35("qwen3_5-mlx-q4g64", false, true);
    check_qwen35("qwen3_5_moe", true, false);
    check_qwen35("qwen3_5_moe-mlx-q4g64", true, true);
    check_nemotron("nemotron_h", false, false);
    check_nemotron("nemotron_h-mlx-q4g64", false, true);
    check_nemotron("nemotron_h_moe", true, false);
    check_nemotron("nemotron_h_moe-mlx-q4g64", true, true);
    check_legacy_and_v5();
    check_patterns();
    check_nonfinite();
    check_errors();
    for (int f = WEFT_FAMILY_LLAMA; f <= WEFT_FAMILY_NEMOTRON_H; f++)
        CHECK(strcmp(weft_family_name((weft_family)f), "unknown") != 0);
    CHECK_STR(weft_family_name(WEFT_FAMILY_QWEN3_5_MOE), "qwen3_5_moe");
    CHECK_STR(weft_family_name(WEFT_FAMILY_UNKNOWN), "unknown");
    return check_report("test_config");
}
