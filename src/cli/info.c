/* weft info MODEL: family, format, quantization, context, weights bytes, memory estimate (SPEC §2). */
#include "load.h"
#include "weft/families.h"

#include <stdio.h>

int cmd_info(const cli_options *o) {
    weft_model *m = NULL;
    int rc = cli_load_model(o, &m);
    if (rc) return rc;
    const weft_config *c = &m->cfg;
    static const char *FORMATS[] = {"safetensors", "mlx-affine", "gguf"};
    int ctx = weft_model_context(m);
    int64_t kvd = (c->n_kv_heads > 0 ? c->n_kv_heads : c->n_heads) *
                  (c->head_dim > 0 ? c->head_dim : c->hidden_size / (c->n_heads > 0 ? c->n_heads : 1));
    double kv_per_stream = (double)c->n_layers * 2.0 * (double)ctx * (double)kvd * 4.0;
    printf("model          %s\n", m->path);
    printf("family         %s (%s)\n", weft_family_name(c->family), c->model_type);
    printf("format         %s\n", FORMATS[m->format]);
    printf("weights        %s, %.2f MiB\n", m->quant, (double)m->weights_bytes / 1048576.0);
    printf("shape          hidden %lld, layers %lld, heads %lld/%lld, head_dim %lld, ffn %lld, vocab %lld\n",
           (long long)c->hidden_size, (long long)c->n_layers, (long long)c->n_heads, (long long)c->n_kv_heads,
           (long long)c->head_dim, (long long)c->intermediate_size, (long long)c->vocab_size);
    printf("context        %d\n", ctx);
    printf("tokenizer      %s\n", m->tokenizer ? "yes" : "none (token-id prompts only)");
    printf("chat template  %s\n", m->chat_template ? "yes" : "none");
    /* as the families decide (qwen3_5_mtp.c, nemotron_h_mtp.c): `mtp.*` tensors and the config's head layer
     * count (Qwen3.5 mtp_num_hidden_layers, Nemotron-H num_nextn_predict_layers), or any count for an MLX
     * checkpoint, whose conversion drops it and whose head comes from an mtp*.safetensors sidecar */
    int64_t mtp_layers =
        c->mtp_num_hidden_layers > 0 ? c->mtp_num_hidden_layers : c->num_nextn_predict_layers;
    bool mtp = weft_mtp_present(m->tensors) && (mtp_layers > 0 || m->format == WEFT_FORMAT_MLX);
    if (mtp && mtp_layers > 0)
        printf("draft head     MTP, %lld layer(s)%s%s\n", (long long)mtp_layers,
               m->mtp_path ? ", from " : " in the checkpoint", m->mtp_path ? m->mtp_path : "");
    else if (mtp)
        printf("draft head     MTP, from the checkpoint directory's safetensors (MLX)\n");
    else
        printf("draft head     none (copy drafts)\n");
    printf("memory         weights %.2f MiB + KV cache %.2f MiB per stream at context %d (fp32)\n",
           (double)m->weights_bytes / 1048576.0, kv_per_stream / 1048576.0, ctx);
    weft_model_free(m);
    return 0;
}
