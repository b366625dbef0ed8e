#!/usr/bin/env python3
"""The folders of hf_reference.py, and what kiln writes, checked with Hugging Face transformers and
PEFT themselves. Neither is a Debian package, so this runs where they are installed (the lent GPU
machine), not in CI; the note of the session that ran it gives its output.

  transformers_check.py REF [FINETUNE]
    REF       the output folder of hf_reference.py: every <variant>/ is loaded with transformers'
              Auto classes and its outputs compared with <variant>/reference.safetensors (the
              PyTorch reference that kiln's tests compare kiln against);
    FINETUNE  a folder holding base/ (finetune_lm --init-model), run/adapter/ and run/merged/
              (finetune_lm --merge): PEFT loads the adapter onto the base, and its logits are
              compared with transformers' logits of the merged folder kiln wrote.
Exits 1 when a difference passes 1e-4.
"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hf_reference import load_st  # noqa: E402

import transformers  # noqa: E402

TOL = 1e-4


def load(folder, cls):
    # transformers 5 names the dtype argument `dtype`, 4 `torch_dtype`.
    major = int(transformers.__version__.split(".")[0])
    dtype = {"dtype": torch.float64} if major >= 5 else {"torch_dtype": torch.float64}
    return cls.from_pretrained(folder, attn_implementation="eager", **dtype).eval()


def check_reference(root):
    worst = 0.0
    for folder in sorted(p for p in Path(root).iterdir() if (p / "reference.safetensors").exists()):
        config = json.loads((folder / "config.json").read_text())
        ref = load_st(folder / "reference.safetensors")
        kwargs = {k: ref[k] for k in ("input_ids", "attention_mask", "token_type_ids") if k in ref}
        if config["model_type"] == "bert":
            cls = (transformers.AutoModelForSequenceClassification
                   if config["architectures"][0] == "BertForSequenceClassification" else transformers.AutoModel)
        else:
            cls = transformers.AutoModelForCausalLM
        model = load(folder, cls)
        with torch.no_grad():
            out = model(**kwargs)
        for name in ("logits", "last_hidden_state", "pooler_output"):
            if name in ref:
                err = (getattr(out, name) - ref[name].double()).abs().max().item()
                worst = max(worst, err)
                print(f"{folder.name:14s} {name:18s} max |transformers - reference| = {err:.3g}")
    return worst


def check_peft(root):
    import peft

    root = Path(root)
    base = load(root / "base", transformers.AutoModelForCausalLM)
    adapted = peft.PeftModel.from_pretrained(base, root / "run" / "adapter").eval()
    merged = load(root / "run" / "merged", transformers.AutoModelForCausalLM)
    ids = torch.randint(0, base.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, m = adapted(input_ids=ids).logits, merged(input_ids=ids).logits
    err = (a - m).abs().max().item()
    print(f"peft {peft.__version__}: PeftModel(base, kiln's adapter) vs kiln's merged folder: "
          f"max |difference| = {err:.3g} (logits up to {m.abs().max().item():.3g})")
    return err


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    worst = check_reference(sys.argv[1])
    if len(sys.argv) == 3:
        worst = max(worst, check_peft(sys.argv[2]))
    sys.exit(0 if worst <= TOL else 1)
