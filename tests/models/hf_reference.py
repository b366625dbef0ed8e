#!/usr/bin/env python3
"""Reference implementations of GPT-2, Llama (with Llama 3, Mistral and Qwen2 variants) and BERT
in PyTorch, written from transformers' modeling code, and Hub-style folders for kiln's tests.

  hf_reference.py OUT                  writes OUT/<variant>/{config.json, model.safetensors,
                                       reference.safetensors} for every variant, plus bf16 and f16
                                       copies of some (OUT/<variant>_bf16, ...)
  hf_reference.py --check SAVED OUT VARIANT...
                                       loads each SAVED/<variant> (as kiln saved it) into the
                                       reference model, every key required and none unexpected, and
                                       checks its output against OUT/<variant>/reference.safetensors;
                                       exits 1 on a mismatch

  hf_reference.py --peft-check VARIANT BASE ADAPTER OUTPUTS
                                       checks ADAPTER (as kiln saved it) against PEFT's layout
                                       (adapter_config.json fields, base_model.model.*.lora_A/B keys
                                       naming modules of BASE), merges it into BASE's weights as
                                       PEFT does and checks the reference output against OUTPUTS's
                                       (kiln's, with the adapter); exits 1 on a mismatch

reference.safetensors holds the inputs (input_ids, and attention_mask / token_type_ids for BERT)
and the float64 reference output ("logits", or "last_hidden_state" and "pooler_output").
The models are random and small; weights are drawn with a fixed seed at a scale that gives
logits of order one, so a wrong layout or formula shows as a large difference.
"""
import json
import math
import struct
import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

# ---- safetensors, written and read with numpy and json (as the format's reference does)

ST_DTYPES = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.int64: "I64", torch.int32: "I32"}
ST_TORCH = {v: k for k, v in ST_DTYPES.items()}


def save_st(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": ST_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def load_st(path):
    data = Path(path).read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        dt = ST_TORCH[info["dtype"]]
        if dt == torch.bfloat16:
            t = torch.from_numpy(np.frombuffer(raw, dtype=np.int16).copy()).view(torch.bfloat16)
        else:
            t = torch.from_numpy(np.frombuffer(raw, dtype=torch.empty(0, dtype=dt).numpy().dtype).copy())
        out[name] = t.reshape(info["shape"])
    return out


# ---- GPT-2 (GPT2LMHeadModel: Conv1D weights are (in, out))

def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def causal_softmax(scores, window=None):
    t_q, t_k = scores.shape[-2:]
    q = torch.arange(t_k - t_q, t_k).reshape(-1, 1)
    k = torch.arange(t_k).reshape(1, -1)
    hidden = k > q
    if window is not None:
        hidden = hidden | (q - k >= window)
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)


def heads(x, n):
    b, t, e = x.shape
    return x.reshape(b, t, n, e // n).transpose(1, 2)


def merge(x):
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


def gpt2_forward(w, c, ids):
    d, n = c["n_embd"], c["n_head"]
    eps = c["layer_norm_epsilon"]
    act = gelu_new if c["activation_function"] in ("gelu_new", "gelu_pytorch_tanh") else F.gelu
    t = ids.shape[1]
    x = w["transformer.wte.weight"][ids] + w["transformer.wpe.weight"][:t]
    for i in range(c["n_layer"]):
        p = f"transformer.h.{i}."
        h = F.layer_norm(x, (d,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        q, k, v = (h @ w[p + "attn.c_attn.weight"] + w[p + "attn.c_attn.bias"]).split(d, dim=2)
        q, k, v = heads(q, n), heads(k, n), heads(v, n)
        att = causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(d // n))
        x = x + merge(att @ v) @ w[p + "attn.c_proj.weight"] + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (d,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        h = act(h @ w[p + "mlp.c_fc.weight"] + w[p + "mlp.c_fc.bias"])
        x = x + h @ w[p + "mlp.c_proj.weight"] + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (d,), w["transformer.ln_f.weight"], w["transformer.ln_f.bias"], eps)
    head = w["transformer.wte.weight"] if c.get("tie_word_embeddings", True) else w["lm_head.weight"]
    return {"logits": x @ head.T}


def gpt2_weights(c, g):
    d, ff, L = c["n_embd"], c.get("n_inner") or 4 * c["n_embd"], c["n_layer"]
    w = {"transformer.wte.weight": rnd(g, c["vocab_size"], d, s=0.5),
         "transformer.wpe.weight": rnd(g, c["n_positions"], d, s=0.5)}
    for i in range(L):
        p = f"transformer.h.{i}."
        w[p + "ln_1.weight"] = 1 + rnd(g, d, s=0.1)
        w[p + "ln_1.bias"] = rnd(g, d, s=0.1)
        w[p + "attn.bias"] = torch.tril(torch.ones(c["n_positions"], c["n_positions"])).view(
            1, 1, c["n_positions"], c["n_positions"])  # the causal-mask buffer old checkpoints carry
        w[p + "attn.c_attn.weight"] = rnd(g, d, 3 * d, s=d ** -0.5)
        w[p + "attn.c_attn.bias"] = rnd(g, 3 * d, s=0.1)
        w[p + "attn.c_proj.weight"] = rnd(g, d, d, s=d ** -0.5)
        w[p + "attn.c_proj.bias"] = rnd(g, d, s=0.1)
        w[p + "ln_2.weight"] = 1 + rnd(g, d, s=0.1)
        w[p + "ln_2.bias"] = rnd(g, d, s=0.1)
        w[p + "mlp.c_fc.weight"] = rnd(g, d, ff, s=d ** -0.5)
        w[p + "mlp.c_fc.bias"] = rnd(g, ff, s=0.1)
        w[p + "mlp.c_proj.weight"] = rnd(g, ff, d, s=ff ** -0.5)
        w[p + "mlp.c_proj.bias"] = rnd(g, d, s=0.1)
    w["transformer.ln_f.weight"] = 1 + rnd(g, d, s=0.1)
    w["transformer.ln_f.bias"] = rnd(g, d, s=0.1)
    if not c.get("tie_word_embeddings", True):
        w["lm_head.weight"] = rnd(g, c["vocab_size"], d, s=d ** -0.5)
    return w


# ---- Llama, Mistral, Qwen2 (LlamaForCausalLM and its relatives)

def rms_norm(x, weight, eps):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotary_inv_freq(c):
    dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
    inv = 1.0 / (c.get("rope_theta", 10000.0) ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    s = c.get("rope_scaling")
    if s is None:
        return inv
    kind = s.get("rope_type", s.get("type"))
    if kind == "linear":
        return inv / s["factor"]
    assert kind == "llama3"
    factor, low, high = s["factor"], s["low_freq_factor"], s["high_freq_factor"]
    old = s["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv
    out = torch.where(wavelen > low_wavelen, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * out / factor + smooth * out
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, out)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def llama_forward(w, c, ids):
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    eps = c["rms_norm_eps"]
    window = c.get("sliding_window") if c["model_type"] == "mistral" else None
    t = ids.shape[1]
    freqs = torch.arange(t, dtype=torch.float32).reshape(-1, 1) * rotary_inv_freq(c).reshape(1, -1)
    emb = torch.cat((freqs, freqs), dim=-1).double()
    cos, sin = emb.cos(), emb.sin()
    x = w["model.embed_tokens.weight"][ids]

    def lin(h, name):
        y = h @ w[name + ".weight"].T
        return y + w[name + ".bias"] if name + ".bias" in w else y

    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, w[p + "input_layernorm.weight"], eps)
        q, k, v = (heads(lin(h, p + f"self_attn.{n}_proj"), m) for n, m in (("q", nh), ("k", nkv), ("v", nkv)))
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        att = causal_softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), window)
        x = x + lin(merge(att @ v), p + "self_attn.o_proj")
        h = rms_norm(x, w[p + "post_attention_layernorm.weight"], eps)
        x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms_norm(x, w["model.norm.weight"], eps)
    head = w["model.embed_tokens.weight"] if c.get("tie_word_embeddings", False) else w["lm_head.weight"]
    return {"logits": x @ head.T}


def llama_weights(c, g):
    d, ff = c["hidden_size"], c["intermediate_size"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or d // nh
    qwen = c["model_type"] == "qwen2"
    bias = c.get("attention_bias", False)
    w = {"model.embed_tokens.weight": rnd(g, c["vocab_size"], d, s=1.0)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        for n, out in (("q", nh * hd), ("k", nkv * hd), ("v", nkv * hd)):
            w[p + f"self_attn.{n}_proj.weight"] = rnd(g, out, d, s=d ** -0.5)
            if qwen or bias:
                w[p + f"self_attn.{n}_proj.bias"] = rnd(g, out, s=0.1)
        w[p + "self_attn.o_proj.weight"] = rnd(g, d, nh * hd, s=(nh * hd) ** -0.5)
        if bias:
            w[p + "self_attn.o_proj.bias"] = rnd(g, d, s=0.1)
        if c["model_type"] == "llama":
            w[p + "self_attn.rotary_emb.inv_freq"] = rotary_inv_freq(c)  # a buffer older files carry
        w[p + "mlp.gate_proj.weight"] = rnd(g, ff, d, s=d ** -0.5)
        w[p + "mlp.up_proj.weight"] = rnd(g, ff, d, s=d ** -0.5)
        w[p + "mlp.down_proj.weight"] = rnd(g, d, ff, s=ff ** -0.5)
        w[p + "input_layernorm.weight"] = 1 + rnd(g, d, s=0.1)
        w[p + "post_attention_layernorm.weight"] = 1 + rnd(g, d, s=0.1)
    w["model.norm.weight"] = 1 + rnd(g, d, s=0.1)
    if not c.get("tie_word_embeddings", False):
        w["lm_head.weight"] = rnd(g, c["vocab_size"], d, s=d ** -0.5)
    return w


# ---- BERT (BertModel, BertForSequenceClassification)

def bert_encode(w, c, ids, mask, types, p=""):
    d, nh, eps = c["hidden_size"], c["num_attention_heads"], c["layer_norm_eps"]
    act = F.gelu if c.get("hidden_act", "gelu") == "gelu" else gelu_new
    t = ids.shape[1]
    e = p + "embeddings."
    x = w[e + "word_embeddings.weight"][ids] + w[e + "position_embeddings.weight"][:t] + \
        w[e + "token_type_embeddings.weight"][types]
    x = F.layer_norm(x, (d,), w[e + "LayerNorm.weight"], w[e + "LayerNorm.bias"], eps)
    add = ((1.0 - mask.double()) * torch.finfo(torch.float64).min)[:, None, None, :]

    def lin(h, name):
        return h @ w[name + ".weight"].T + w[name + ".bias"]

    for i in range(c["num_hidden_layers"]):
        q_ = p + f"encoder.layer.{i}."
        q, k, v = (heads(lin(x, q_ + f"attention.self.{n}"), nh) for n in ("query", "key", "value"))
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d // nh) + add, dim=-1)
        a = F.layer_norm(lin(merge(att @ v), q_ + "attention.output.dense") + x, (d,),
                         w[q_ + "attention.output.LayerNorm.weight"], w[q_ + "attention.output.LayerNorm.bias"], eps)
        h = act(lin(a, q_ + "intermediate.dense"))
        x = F.layer_norm(lin(h, q_ + "output.dense") + a, (d,), w[q_ + "output.LayerNorm.weight"],
                         w[q_ + "output.LayerNorm.bias"], eps)
    pooled = torch.tanh(lin(x[:, 0], p + "pooler.dense"))
    return x, pooled


def bert_forward(w, c, ids, mask, types):
    if "classifier.weight" in w:
        _, pooled = bert_encode(w, c, ids, mask, types, "bert.")
        return {"logits": pooled @ w["classifier.weight"].T + w["classifier.bias"]}
    x, pooled = bert_encode(w, c, ids, mask, types)
    return {"last_hidden_state": x, "pooler_output": pooled}


def bert_weights(c, g, prefix, labels=None):
    d, ff = c["hidden_size"], c["intermediate_size"]
    e = prefix + "embeddings."
    w = {e + "word_embeddings.weight": rnd(g, c["vocab_size"], d, s=1.0),
         e + "position_embeddings.weight": rnd(g, c["max_position_embeddings"], d, s=0.5),
         e + "token_type_embeddings.weight": rnd(g, c["type_vocab_size"], d, s=0.5),
         e + "LayerNorm.weight": 1 + rnd(g, d, s=0.1), e + "LayerNorm.bias": rnd(g, d, s=0.1)}
    for i in range(c["num_hidden_layers"]):
        p = prefix + f"encoder.layer.{i}."
        for name, i_, o in (("attention.self.query", d, d), ("attention.self.key", d, d),
                            ("attention.self.value", d, d), ("attention.output.dense", d, d),
                            ("intermediate.dense", d, ff), ("output.dense", ff, d)):
            w[p + name + ".weight"] = rnd(g, o, i_, s=i_ ** -0.5)
            w[p + name + ".bias"] = rnd(g, o, s=0.1)
        for name in ("attention.output.LayerNorm", "output.LayerNorm"):
            w[p + name + ".weight"] = 1 + rnd(g, d, s=0.1)
            w[p + name + ".bias"] = rnd(g, d, s=0.1)
    w[prefix + "pooler.dense.weight"] = rnd(g, d, d, s=d ** -0.5)
    w[prefix + "pooler.dense.bias"] = rnd(g, d, s=0.1)
    if labels:
        w["classifier.weight"] = rnd(g, labels, d, s=d ** -0.5)
        w["classifier.bias"] = rnd(g, labels, s=0.1)
    return w


# ---- the variants

def rnd(g, *shape, s):
    return torch.randn(*shape, generator=g, dtype=torch.float32) * s


GPT2 = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 61, "n_positions": 32,
        "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
        "resid_pdrop": 0.1, "embd_pdrop": 0.1, "attn_pdrop": 0.1, "layer_norm_epsilon": 1e-5,
        "bos_token_id": 0, "eos_token_id": 0}
LLAMA = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 67, "hidden_size": 32,
         "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
         "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0, "hidden_act": "silu",
         "tie_word_embeddings": False, "attention_bias": False, "rope_scaling": None}
BERT = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 71, "hidden_size": 32,
        "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 40,
        "type_vocab_size": 2, "layer_norm_eps": 1e-12, "position_embedding_type": "absolute"}

VARIANTS = {
    "gpt2": dict(GPT2),
    "gpt2_untied": dict(GPT2, tie_word_embeddings=False, activation_function="gelu", n_inner=40),
    "llama": dict(LLAMA, attention_bias=True),
    "llama3": dict(LLAMA, num_key_value_heads=2, hidden_size=64, head_dim=16, rope_theta=10000.0,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 64}),
    "mistral": dict(LLAMA, model_type="mistral", architectures=["MistralForCausalLM"], num_key_value_heads=2,
                    sliding_window=5),
    "qwen2": dict(LLAMA, model_type="qwen2", architectures=["Qwen2ForCausalLM"], num_key_value_heads=1,
                  tie_word_embeddings=True, use_sliding_window=False),
    "bert": dict(BERT),
    "bert_cls": dict(BERT, architectures=["BertForSequenceClassification"],
                     id2label={"0": "neg", "1": "mid", "2": "pos"}, label2id={"neg": 0, "mid": 1, "pos": 2}),
}


def make_weights(name, c, g):
    if c["model_type"] == "gpt2":
        return gpt2_weights(c, g)
    if c["model_type"] == "bert":
        return bert_weights(c, g, "bert." if name == "bert_cls" else "", 3 if name == "bert_cls" else None)
    return llama_weights(c, g)


def inputs_for(c, g):
    vocab = c["vocab_size"]
    ids = torch.randint(0, vocab, (2, 11), generator=g)
    if c["model_type"] != "bert":
        return {"input_ids": ids}
    mask = torch.ones(2, 11, dtype=torch.int64)
    mask[1, 7:] = 0  # the second row is padded
    types = torch.zeros(2, 11, dtype=torch.int64)
    types[:, 6:] = 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def run(c, w, inputs):
    w = {k: v.double() if v.is_floating_point() else v for k, v in w.items()}
    with torch.no_grad():
        if c["model_type"] == "gpt2":
            return gpt2_forward(w, c, inputs["input_ids"])
        if c["model_type"] == "bert":
            return bert_forward(w, c, inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        return llama_forward(w, c, inputs["input_ids"])


def expected_keys(name, c):
    keys = set(make_weights(name, c, torch.Generator().manual_seed(0)))
    return {k for k in keys if not k.endswith(".attn.bias") and not k.endswith("rotary_emb.inv_freq")}


def write_all(out):
    for i, (name, c) in enumerate(VARIANTS.items()):
        g = torch.Generator().manual_seed(1000 + i)
        w = make_weights(name, c, g)
        inputs = inputs_for(c, g)
        ref = run(c, w, inputs)
        folder = out / name
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps(dict(c, torch_dtype="float32"), indent=2))
        save_st(folder / "model.safetensors", w, {"format": "pt"})
        save_st(folder / "reference.safetensors", dict(inputs, **ref))
        if name in ("llama3", "gpt2", "bert"):
            # 16-bit copies, with the reference computed from the rounded weights.
            for dt, tag in ((torch.bfloat16, "bf16"), (torch.float16, "f16")):
                w16 = {k: v.to(dt) if v.is_floating_point() else v for k, v in w.items()}
                f16 = out / f"{name}_{tag}"
                f16.mkdir()
                (f16 / "config.json").write_text(json.dumps(dict(c, torch_dtype=str(dt)[6:]), indent=2))
                save_st(f16 / "model.safetensors", w16, {"format": "pt"})
                save_st(f16 / "reference.safetensors", dict(inputs, **run(c, w16, inputs)))


def check(name, folder, ref_path):
    c = json.loads((folder / "config.json").read_text())
    w = load_st(folder / "model.safetensors")
    want = expected_keys(name, VARIANTS[name])
    missing, unexpected = sorted(want - set(w)), sorted(set(w) - want)
    if missing or unexpected:
        print(f"{name}: keys differ: missing {missing}, unexpected {unexpected}")
        return 1
    ref = load_st(ref_path)
    inputs = {k: v for k, v in ref.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    got = run(c, w, inputs)
    for k, v in got.items():
        err = (v - ref[k]).abs().max().item()
        if err > 1e-5:
            print(f"{name}: {k}: max difference {err}")
            return 1
    print(f"{name}: ok")
    return 0


def peft_check(name, base, adapter, outputs):
    base, adapter = Path(base), Path(adapter)
    c = json.loads((base / "config.json").read_text())
    w = {k: v.double() for k, v in load_st(base / "model.safetensors").items()}
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    task = {"bert": "FEATURE_EXTRACTION", "bert_cls": "SEQ_CLS"}.get(name, "CAUSAL_LM")
    want = {"peft_type": "LORA", "bias": "none", "task_type": task, "fan_in_fan_out": c["model_type"] == "gpt2",
            "use_dora": False, "use_rslora": False}
    for k, v in want.items():
        if cfg.get(k) != v:
            print(f"adapter_config.json: {k} is {cfg.get(k)!r}, PEFT's layout needs {v!r}")
            return 1
    scale = cfg["lora_alpha"] / cfg["r"]
    factors = load_st(adapter / "adapter_model.safetensors")
    modules = {}
    for k, v in factors.items():
        prefix = "base_model.model."
        if not k.startswith(prefix) or not (k.endswith(".lora_A.weight") or k.endswith(".lora_B.weight")):
            print(f"{k}: not a PEFT LoRA key")
            return 1
        module, factor = k[len(prefix):-len(".lora_A.weight")], k[-len("lora_A.weight"):-len(".weight")]
        if module.split(".")[-1] not in cfg["target_modules"] or module + ".weight" not in w:
            print(f"{k}: names no targeted module of the base model")
            return 1
        modules.setdefault(module, {})[factor] = v.double()
    for module, f in modules.items():
        a, b = f["lora_A"], f["lora_B"]
        if a.shape[0] != cfg["r"] or b.shape[1] != cfg["r"]:
            print(f"{module}: factors {tuple(a.shape)} and {tuple(b.shape)} for r {cfg['r']}")
            return 1
        delta = scale * (b @ a)
        w[module + ".weight"] = w[module + ".weight"] + (delta.T if cfg["fan_in_fan_out"] else delta)
    ref = load_st(outputs)
    inputs = {k: v for k, v in ref.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
    for k, v in run(c, w, inputs).items():
        err = (v - ref[k].double()).abs().max().item()
        if err > 1e-4:
            print(f"{name}: {k}: max difference {err} between kiln with the adapter and PEFT's merge")
            return 1
    print(f"{name}: {len(modules)} adapted modules ok")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--peft-check":
        sys.exit(peft_check(*sys.argv[2:]))
    if len(sys.argv) >= 5 and sys.argv[1] == "--check":
        saved, out = Path(sys.argv[2]), Path(sys.argv[3])
        sys.exit(max(check(v, saved / v, out / v / "reference.safetensors") for v in sys.argv[4:]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    write_all(Path(sys.argv[1]))
