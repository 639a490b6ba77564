/* NextN (MTP) heads in GGUF files written by llama.cpp's converter (docs families-and-formats §3.9, §6.5;
 * llama.cpp conversion/qwen.py _QwenMtpMixin, src/models/qwen35.cpp load_block_mtp): the checks of a NextN
 * block's own tensors, and a head written alone as a separate file (`convert_hf_to_gguf.py --mtp`).
 *
 * The converter renames HF `mtp.*` to one extra block L = num_hidden_layers per MTP layer: mtp.fc →
 * blk.L.nextn.eh_proj, mtp.pre_fc_norm_embedding → nextn.enorm, pre_fc_norm_hidden → nextn.hnorm, mtp.norm →
 * nextn.shared_head_norm, mtp.layers.0.* → the block's ordinary attn_* / post_attention_norm / ffn_* names;
 * block_count counts the block and {arch}.nextn_predict_layers says how many trailing blocks are NextN. Its
 * value transforms are the trunk's (zero-centred norms stored as 1 + w, cfg.norms_plus_one): the names map
 * back to hub names in gguf_hybrid.c and the qwen3_5 head honours the flag. With --mtp the file keeps the
 * model's metadata, token_embd / output_norm / output and the NextN blocks only; with --no-nextn the model's
 * file has no NextN block and no nextn_predict_layers. */
#include "gguf_hybrid.h"
#include "gguf_impl.h"

#include <stdio.h>
#include <string.h>

/* {arch}.suffix as an integer, or dflt when absent or not an integer. */
static int64_t arch_int(const weft_gguf *g, const char *suffix, int64_t dflt) {
    const char *arch = weft_gguf_arch(g);
    char key[128];
    int64_t v = dflt;
    if (!arch) return dflt;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (weft_gguf_find(g, key) < 0 || weft_gguf_get_int(g, key, &v, NULL) != WEFT_OK) return dflt;
    return v;
}

static bool float_type(weft_dtype d) {
    return d == WEFT_DT_F32 || d == WEFT_DT_F16 || d == WEFT_DT_BF16;
}

static bool weight_type(weft_dtype d) {
    return float_type(d) || (d >= WEFT_DT_Q4_0 && d <= WEFT_DT_Q6_K);
}

weft_status weft_gguf_nextn_check(const weft_gguf *g, long from, long n, weft_err *err) {
    const int64_t H = arch_int(g, "embedding_length", -1);
    if (H <= 0)
        return weft_err_set(err, WEFT_EFORMAT, "%s: NextN blocks but no %s.embedding_length", g->source,
                            weft_gguf_arch(g) ? weft_gguf_arch(g) : "?");
    static const char *const stems[4] = {"eh_proj", "enorm", "hnorm", "shared_head_norm"};
    for (long b = from; b < from + n; b++)
        for (int k = 0; k < 4; k++) {
            char name[96];
            snprintf(name, sizeof name, "blk.%ld.nextn.%s.weight", b, stems[k]);
            const weft_gguf_tensor_info *ti = weft_gguf_tensor_find(g, name);
            if (!ti)
                return weft_err_set(err, WEFT_EFORMAT,
                                    "%s: NextN block %ld lacks tensor %s (a NextN block holds nextn.eh_proj, "
                                    "nextn.enorm, nextn.hnorm and nextn.shared_head_norm)",
                                    g->source, b, name);
            const bool mat = k == 0;
            if (mat ? ti->n_dims != 2 || ti->ne[0] != 2 * H || ti->ne[1] != H
                    : ti->n_dims != 1 || ti->ne[0] != H) {
                char want[64], got[96];
                if (mat)
                    snprintf(want, sizeof want, "{%lld, %lld}", (long long)(2 * H), (long long)H);
                else
                    snprintf(want, sizeof want, "{%lld}", (long long)H);
                int w = snprintf(got, sizeof got, "{%lld", (long long)ti->ne[0]);
                for (int d = 1; d < ti->n_dims && w > 0 && (size_t)w < sizeof got; d++)
                    w += snprintf(got + w, sizeof got - (size_t)w, ", %lld", (long long)ti->ne[d]);
                if (w > 0 && (size_t)w < sizeof got - 1) snprintf(got + w, sizeof got - (size_t)w, "}");
                return weft_err_set(err, WEFT_EFORMAT,
                                    "%s: tensor %s: ne %s expected (embedding_length %lld), found %s",
                                    g->source, name, want, (long long)H, got);
            }
            if (mat ? !weight_type(ti->dtype) : !float_type(ti->dtype))
                return weft_err_set(err, WEFT_ENOTSUP, "%s: tensor %s: type %s cannot be used as %s",
                                    g->source, name, weft_gguf_ggml_type_name(ti->ggml_type),
                                    mat ? "a weight" : "a norm (F32, F16 or BF16)");
        }
    return WEFT_OK;
}

bool weft_gguf_mtp_fits(const weft_gguf *head, const weft_gguf *trunk, char *why, size_t cap) {
    const char *ha = weft_gguf_arch(head), *ta = weft_gguf_arch(trunk);
    if (!ha || !ta || strcmp(ha, ta)) {
        snprintf(why, cap, "architecture %s, the model's is %s", ha ? ha : "(none)", ta ? ta : "(none)");
        return false;
    }
    if (weft_gguf_hybrid_of(ta) != WEFT_GGUF_QWEN35) {
        snprintf(why, cap, "architecture %s has no GGUF NextN head in weft", ta);
        return false;
    }
    const int64_t n = arch_int(head, "nextn_predict_layers", 0), hb = arch_int(head, "block_count", -1);
    const int64_t tb = arch_int(trunk, "block_count", -1);
    if (n < 1 || hb <= n) {
        snprintf(why, cap, "no NextN blocks (%s.nextn_predict_layers %lld, block_count %lld)", ha,
                 (long long)n, (long long)hb);
        return false;
    }
    if (arch_int(trunk, "nextn_predict_layers", 0) > 0) {
        snprintf(why, cap, "the model has NextN blocks of its own");
        return false;
    }
    if (hb - n != tb) {
        snprintf(why, cap, "its NextN blocks follow %lld blocks, the model has %lld", (long long)(hb - n),
                 (long long)tb);
        return false;
    }
    const int64_t he = arch_int(head, "embedding_length", -1), te = arch_int(trunk, "embedding_length", -2);
    if (he != te) {
        snprintf(why, cap, "embedding_length %lld, the model's is %lld", (long long)he, (long long)te);
        return false;
    }
    const weft_gguf_tensor_info *et = weft_gguf_tensor_find(head, "token_embd.weight"),
                                *tt = weft_gguf_tensor_find(trunk, "token_embd.weight");
    if (et && tt && (et->n_dims != tt->n_dims || et->ne[1] != tt->ne[1])) {
        snprintf(why, cap, "a vocabulary of %lld tokens, the model's has %lld", (long long)et->ne[1],
                 (long long)tt->ne[1]);
        return false;
    }
    return true;
}

weft_status weft_gguf_mtp_head(weft_gguf *head, const weft_gguf *trunk, weft_tensor_set *set, int64_t *n_mtp,
                               size_t *bytes, weft_err *err) {
    *n_mtp = 0;
    *bytes = 0;
    if (head->mapping_given)
        return weft_err_set(err, WEFT_EINVAL, "%s: the file mapping was already handed to a tensor set",
                            head->source);
    char why[256];
    if (!weft_gguf_mtp_fits(head, trunk, why, sizeof why))
        return weft_err_set(err, WEFT_EFORMAT, "%s is not an MTP head file for %s: %s", head->source,
                            trunk->source, why);
    const int64_t n = arch_int(head, "nextn_predict_layers", 0), blocks = arch_int(head, "block_count", -1);
    const long from = (long)(blocks - n);
    weft_status st = weft_gguf_nextn_check(head, from, (long)n, err);
    if (st) return st;
    /* the set owns the bytes from here on, so that a failure below leaves no tensor pointing into an unmapped
     * file when the caller closes head */
    if (head->map) {
        weft_tensor_set_own_mapping(set, head->map, head->map_len);
        head->map = NULL;
    }
    if (head->file_backed) head->mapping_given = true;
    size_t added = 0;
    for (size_t k = 0; k < head->n_tensors; k++) {
        const weft_gguf_tensor_info *ti = &head->tensors[k];
        char name[256];
        long layer;
        bool small;
        if (!weft_gguf_hybrid_map(WEFT_GGUF_QWEN35, ti->name, from, name, sizeof name, &layer, &small))
            return small ? weft_err_set(err, WEFT_EINVAL, "tensor '%s': name buffer too small", ti->name)
                         : weft_err_set(err, WEFT_EFORMAT, "%s: unknown tensor '%s' for architecture %s",
                                        head->source, ti->name, weft_gguf_arch(head));
        if (layer < from) continue; /* token_embd, output_norm, output: the head runs on the trunk's */
        if (layer >= blocks)
            return weft_err_set(err, WEFT_EFORMAT, "%s: tensor '%s' is past %s.block_count = %lld",
                                head->source, ti->name, weft_gguf_arch(head), (long long)blocks);
        if ((st = weft_gguf_add_tensor(head, ti, name, true, set, err))) return st;
        added += ti->nbytes;
    }
    *n_mtp = n;
    *bytes = added;
    return WEFT_OK;
}
