#!/usr/bin/env python3
"""Makes tiny random DeepSeek V2/V3 checkpoints and their fp32 reference outputs.

Runs where torch and transformers are installed (the GPU machine):
    python3 tests/tools/make_model_fixtures.py --out tests/fixtures/models

Each fixture folder holds:
  config.json          as transformers writes it (newer keys: rope_parameters, dtype)
  model.safetensors    weights under the names of the real DeepSeek checkpoints
                       (per-expert gate/up/down, e_score_correction_bias, MTP layer at index L)
  reference.safetensors  fp32 logits of every prompt position, "logits_<i>" -> [len, vocab]
  reference.json       prompts (input ids) and greedy continuations (token ids)

The truth is the original DeepSeek formulation evaluated by transformers in fp32. Where a
transformers version departs from it (its DeepseekV2 attention drops the YaRN mscale^2 softmax
correction the original code and every serving engine apply), the script sets the module to the
original value and records what it changed in reference.json.
"""
import argparse
import json
import math
import os

import torch
from safetensors.torch import save_file

import transformers
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

VOCAB = 512
PROMPT_LENS = [1, 2, 7, 33, 130, 300]
NUM_CONTINUATION = 12


def yarn_get_mscale(scale, mscale):
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek_softmax_scale(cfg):
    qk = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    scale = qk ** -0.5
    rs = cfg.get("rope_scaling")
    if rs and rs.get("mscale_all_dim"):
        m = yarn_get_mscale(rs["factor"], rs["mscale_all_dim"])
        scale *= m * m
    return scale


def deepseek_inv_freq_and_mscale(cfg):
    dim = cfg["qk_rope_head_dim"]
    base = cfg["rope_theta"]
    exps = torch.arange(0, dim, 2, dtype=torch.float32) / dim
    freq_extra = 1.0 / (base ** exps)
    rs = cfg.get("rope_scaling")
    if not rs:
        return freq_extra, 1.0
    factor = rs["factor"]
    orig = rs["original_max_position_embeddings"]
    freq_inter = 1.0 / (factor * base ** exps)

    def corr_dim(rot):
        return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(rs["beta_fast"])), 0)
    high = min(math.ceil(corr_dim(rs["beta_slow"])), dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    extra_mask = 1.0 - ramp
    inv_freq = freq_inter * (1 - extra_mask) + freq_extra * extra_mask
    ms = yarn_get_mscale(factor, rs["mscale"]) / yarn_get_mscale(factor, rs["mscale_all_dim"])
    return inv_freq, ms


def yarn(mscale):
    return {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 128, "beta_fast": 32,
            "beta_slow": 1, "mscale": mscale, "mscale_all_dim": mscale}


BASE = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=3, first_k_dense_replace=1, moe_layer_freq=1, num_attention_heads=4,
            num_key_value_heads=4, q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
            qk_rope_head_dim=16, v_head_dim=24, n_routed_experts=8, n_shared_experts=1,
            num_experts_per_tok=3, n_group=1, topk_group=1, hidden_act="silu", rms_norm_eps=1e-6,
            max_position_embeddings=8192, rope_theta=10000.0, attention_bias=False,
            tie_word_embeddings=False, bos_token_id=0, eos_token_id=1)

FIXTURES = {
    # V2-Lite style: no q_lora, softmax greedy, 2 shared experts, yarn mscale 0.707
    "v2_greedy": dict(arch="v2", q_lora_rank=None, topk_method="greedy", scoring_func="softmax",
                      norm_topk_prob=False, routed_scaling_factor=1.0, n_shared_experts=2,
                      rope_scaling=yarn(0.707)),
    # V2 style: q_lora, softmax group-limited greedy, routed scaling, two dense layers
    "v2_group_limited": dict(arch="v2", topk_method="group_limited_greedy", scoring_func="softmax",
                             n_group=4, topk_group=2, norm_topk_prob=False, routed_scaling_factor=2.0,
                             first_k_dense_replace=2, num_hidden_layers=4, rope_scaling=yarn(0.707)),
    # V3 style: sigmoid noaux_tc with a correction bias, groups, yarn mscale 1.0, an MTP layer
    "v3_noaux_tc": dict(arch="v3", topk_method="noaux_tc", scoring_func="sigmoid", n_group=4,
                        topk_group=2, norm_topk_prob=True, routed_scaling_factor=2.5,
                        num_nextn_predict_layers=1, rope_scaling=yarn(1.0)),
    # V3 without q_lora and without yarn, no topk normalization
    "v3_plain_rope": dict(arch="v3", q_lora_rank=None, topk_method="noaux_tc", scoring_func="sigmoid",
                          n_group=2, topk_group=1, norm_topk_prob=False, routed_scaling_factor=1.5,
                          rope_scaling=None, first_k_dense_replace=0),
    # V3 with the real MLA dims (latent 512 + rope 64, nope 128, v 128): what the CUDA kernels need
    "v3_mla_dims": dict(arch="v3", hidden_size=128, num_attention_heads=2, num_key_value_heads=2,
                        q_lora_rank=96, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                        v_head_dim=128, intermediate_size=128, moe_intermediate_size=32,
                        n_routed_experts=16, num_experts_per_tok=4, n_group=4, topk_group=2,
                        topk_method="noaux_tc", scoring_func="sigmoid", norm_topk_prob=True,
                        routed_scaling_factor=2.5, num_hidden_layers=2, rope_scaling=yarn(1.0)),
}


def make_config(name, spec):
    cfg = dict(BASE)
    cfg.update({k: v for k, v in spec.items() if k != "arch"})
    cfg.setdefault("num_nextn_predict_layers", 0)
    if spec["arch"] == "v2":
        cfg.pop("num_nextn_predict_layers")
        cls_cfg, cls_model, arch = DeepseekV2Config, DeepseekV2ForCausalLM, "DeepseekV2ForCausalLM"
    else:
        cls_cfg, cls_model, arch = DeepseekV3Config, DeepseekV3ForCausalLM, "DeepseekV3ForCausalLM"
    return cfg, cls_cfg, cls_model, arch


def init_weights(model, gen):
    """Weights with spread: fan-in scaled normals, norms near 1, so the logits are not flat."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=gen))
            else:
                fan_in = p.shape[-1]
                p.copy_(torch.randn(p.shape, generator=gen) * (1.5 / math.sqrt(fan_in)))
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(0.3 * torch.randn(b.shape, generator=gen))


def deepseek_state_dict(model, cfg):
    """The model's tensors under the real checkpoints' names (one tensor per expert projection)."""
    out = {}
    inter = cfg["moe_intermediate_size"]
    for k, v in model.state_dict().items():
        v = v.detach().float().contiguous()
        if "rotary_emb" in k or k.endswith("inv_freq"):
            continue
        if k.endswith("mlp.experts.gate_up_proj"):
            prefix = k[: -len("gate_up_proj")]
            for e in range(v.shape[0]):
                out[f"{prefix}{e}.gate_proj.weight"] = v[e, :inter].contiguous()
                out[f"{prefix}{e}.up_proj.weight"] = v[e, inter:].contiguous()
        elif k.endswith("mlp.experts.down_proj"):
            prefix = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{prefix}{e}.down_proj.weight"] = v[e].contiguous()
        elif k.endswith("mlp.gate.e_score_correction_bias"):
            out[k] = v
        else:
            out[k] = v
    return out


def mtp_weights(cfg, gen):
    """NextN module at layer index L (not run by transformers; loaded and shape-checked by us)."""
    L, H = cfg["num_hidden_layers"], cfg["hidden_size"]
    p = f"model.layers.{L}."
    r = lambda *s: torch.randn(*s, generator=gen) / math.sqrt(s[-1])
    w = {p + "enorm.weight": torch.ones(H), p + "hnorm.weight": torch.ones(H),
         p + "eh_proj.weight": r(H, 2 * H), p + "embed_tokens.weight": r(cfg["vocab_size"], H),
         p + "shared_head.norm.weight": torch.ones(H), p + "shared_head.head.weight": r(cfg["vocab_size"], H),
         p + "input_layernorm.weight": torch.ones(H), p + "post_attention_layernorm.weight": torch.ones(H)}
    nh, nope, rope, vd, kvl = (cfg["num_attention_heads"], cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"],
                              cfg["v_head_dim"], cfg["kv_lora_rank"])
    a = p + "self_attn."
    if cfg["q_lora_rank"]:
        w[a + "q_a_proj.weight"] = r(cfg["q_lora_rank"], H)
        w[a + "q_a_layernorm.weight"] = torch.ones(cfg["q_lora_rank"])
        w[a + "q_b_proj.weight"] = r(nh * (nope + rope), cfg["q_lora_rank"])
    else:
        w[a + "q_proj.weight"] = r(nh * (nope + rope), H)
    w[a + "kv_a_proj_with_mqa.weight"] = r(kvl + rope, H)
    w[a + "kv_a_layernorm.weight"] = torch.ones(kvl)
    w[a + "kv_b_proj.weight"] = r(nh * (nope + vd), kvl)
    w[a + "o_proj.weight"] = r(H, nh * vd)
    m = p + "mlp."
    E, I = cfg["n_routed_experts"], cfg["moe_intermediate_size"]
    w[m + "gate.weight"] = r(E, H)
    w[m + "gate.e_score_correction_bias"] = 0.1 * torch.randn(E, generator=gen)
    for e in range(E):
        w[f"{m}experts.{e}.gate_proj.weight"] = r(I, H)
        w[f"{m}experts.{e}.up_proj.weight"] = r(I, H)
        w[f"{m}experts.{e}.down_proj.weight"] = r(H, I)
    S = I * cfg["n_shared_experts"]
    w[m + "shared_experts.gate_proj.weight"] = r(S, H)
    w[m + "shared_experts.up_proj.weight"] = r(S, H)
    w[m + "shared_experts.down_proj.weight"] = r(H, S)
    return {k: v.contiguous() for k, v in w.items()}


def align_to_deepseek(model, cfg, notes):
    """Sets transformers' RoPE and softmax scale to the original DeepSeek values where they differ."""
    want_inv_freq, want_ms = deepseek_inv_freq_and_mscale(cfg)
    want_scale = deepseek_softmax_scale(cfg)
    rot = model.model.rotary_emb
    d = (rot.inv_freq.float().cpu() - want_inv_freq).abs().max().item()
    if d > 1e-6 or abs(float(rot.attention_scaling) - want_ms) > 1e-7:
        notes.append(f"rotary inv_freq max diff {d:.3g}, attention_scaling {rot.attention_scaling} -> {want_ms}: set")
        rot.inv_freq.copy_(want_inv_freq.to(rot.inv_freq.device))
        rot.attention_scaling = want_ms
    for layer in model.model.layers:
        att = layer.self_attn
        if abs(att.scaling - want_scale) > 1e-9:
            notes.append(f"attention scaling {att.scaling:.6g} -> {want_scale:.6g}: set")
            att.scaling = want_scale


def run_fixture(name, spec, out_root, device):
    cfg, cls_cfg, cls_model, arch = make_config(name, spec)
    seed = sum(map(ord, name)) * 7919
    gen = torch.Generator().manual_seed(seed)
    hf_cfg = cls_cfg(**cfg)
    hf_cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = cls_model(hf_cfg).float().eval()
    init_weights(model, gen)
    notes = []
    align_to_deepseek(model, cfg, notes)
    notes = sorted(set(notes))
    model.to(device)

    folder = os.path.join(out_root, name)
    os.makedirs(folder, exist_ok=True)
    hf_cfg.architectures = [arch]
    hf_cfg.save_pretrained(folder)
    # The HF config.json may have rewritten keys; keep it, it is what newer checkpoints carry.
    sd = deepseek_state_dict(model, cfg)
    if cfg.get("num_nextn_predict_layers"):
        sd.update(mtp_weights(cfg, gen))
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})

    ref_logits, prompts, conts = {}, [], []
    pgen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for i, n in enumerate(PROMPT_LENS):
            ids = torch.randint(2, VOCAB, (n,), generator=pgen)
            x = ids[None].to(device)
            logits = model(input_ids=x, use_cache=False).logits[0].float().cpu()
            ref_logits[f"logits_{i}"] = logits.contiguous()
            # greedy continuation by full forwards: no cache involved in the reference
            seq = x
            out = []
            for _ in range(NUM_CONTINUATION):
                nxt = model(input_ids=seq, use_cache=False).logits[0, -1].argmax().view(1, 1)
                out.append(int(nxt))
                seq = torch.cat([seq, nxt], dim=1)
            prompts.append(ids.tolist())
            conts.append(out)
            top2 = logits.topk(2, dim=-1).values
            gap = (top2[:, 0] - top2[:, 1]).min().item()
            print(f"{name} prompt {i} len {n}: logit std {logits.std().item():.3f}, min top1-top2 gap {gap:.2e}")
    save_file(ref_logits, os.path.join(folder, "reference.safetensors"))
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump({"transformers_version": transformers.__version__, "torch_version": torch.__version__,
                   "dtype": "float32", "alignment_notes": notes, "prompts": prompts,
                   "greedy_continuations": conts}, f, indent=1)
    print(name, "notes:", notes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    # The models are tiny: the CPU gives plain fp32 with no TF32 shortcuts.
    device = "cpu"
    torch.set_num_threads(min(8, os.cpu_count() or 1))
    print("transformers", transformers.__version__, "torch", torch.__version__, "device", device)
    for name, spec in FIXTURES.items():
        if args.only and name not in args.only.split(","):
            continue
        run_fixture(name, spec, args.out, device)


if __name__ == "__main__":
    main()
