#!/usr/bin/env python3
"""Checks that a model folder written by tfm (save_pretrained, a Trainer checkpoint, `tfm train`)
loads in Hugging Face transformers and gives the logits and loss tfm gives. Needs torch and
transformers from PyPI.

    python3 tools/check_transformers_roundtrip.py MODEL_DIR [--tfm build/tfm] [--tokens 32]

Prints the largest logit difference and both losses as JSON; exits 1 when the logits differ by
more than 1e-4 or the losses by more than 1e-5 relative.
"""
import argparse
import json
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("--tfm", default="build/tfm")
    parser.add_argument("--tokens", type=int, default=32)
    args = parser.parse_args()
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (1, args.tokens), generator=generator)
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
    ids_text = ",".join(str(i) for i in ids[0].tolist())
    tfm = json.loads(subprocess.run(
        [args.tfm, "logits", args.model, "--ids", ids_text, "--all", "--dtype", "f32"],
        check=True, capture_output=True, text=True).stdout)
    tfm_logits = torch.tensor(tfm["logits"]).reshape(out.logits.shape)
    max_diff = (tfm_logits - out.logits).abs().max().item()
    hf_loss = out.loss.item()
    report = {"model": args.model, "max_abs_logit_diff": max_diff, "transformers_loss": hf_loss,
              "tfm_loss": tfm["loss"]}
    print(json.dumps(report, indent=2))
    ok = max_diff <= 1e-4 and abs(tfm["loss"] - hf_loss) <= 1e-5 * abs(hf_loss)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
