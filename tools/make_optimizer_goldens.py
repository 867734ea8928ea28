#!/usr/bin/env python3
"""Writes tests/data/training/optimizer-goldens.json: what torch.optim.AdamW,
torch.nn.utils.clip_grad_norm_ and transformers.get_scheduler compute, so the C++ optimizer is
checked against the libraries the Trainer uses, never against its own output.

Three parameter tensors of odd sizes (the middle one in a group without weight decay, as the
Trainer treats biases and norm weights) take five AdamW steps on fixed random gradients, in three
cases: plain, with gradient clipping before each step, and with the learning rate following a
linear schedule. The gradient scales differ by step so that clipping happens on some steps only.

Usage: python3 tools/make_optimizer_goldens.py  (torch and transformers installed; CPU only)
"""
import json
import pathlib

import numpy as np
import torch
import transformers

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests/data/training/optimizer-goldens.json"

SHAPES = [(7, 13), (37,), (5, 3, 11)]
DECAY = [True, False, True]
STEPS = 5
GRAD_SCALES = [0.01, 1.0, 0.03, 2.0, 0.02]  # total norms ~0.2, ~17, ~0.5, ~34, ~0.3
LR, BETAS, EPS, WEIGHT_DECAY = 1e-2, (0.9, 0.95), 1e-8, 0.1
MAX_NORM = 1.0
SCHEDULED = {"name": "linear", "warmup": 2, "total": STEPS}
SCHEDULES = [(name, warmup, total)
             for name in ("constant", "constant_with_warmup", "linear", "cosine")
             for warmup, total in ((5, 20), (0, 7))] + [("cosine", 4, 4)]
EXTRA_SCHEDULE_STEPS = 4  # past num_training_steps: the multiplier must stay clamped at 0


def f32_list(t):
    # Shortest decimal that reads back as the same float32: exact and small.
    return [float(str(np.float32(x))) for x in t.detach().reshape(-1).numpy()]


def flat(tensors):
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def make_params(generator):
    return [torch.randn(s, generator=generator, dtype=torch.float32) for s in SHAPES]


def run_case(init, grads, clip, scheduled):
    params = [torch.nn.Parameter(p.clone()) for p in init]
    groups = [
        {"params": [p for p, d in zip(params, DECAY) if d], "weight_decay": WEIGHT_DECAY},
        {"params": [p for p, d in zip(params, DECAY) if not d], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS)
    sched = None
    if scheduled:
        sched = transformers.get_scheduler(SCHEDULED["name"], opt,
                                           num_warmup_steps=SCHEDULED["warmup"],
                                           num_training_steps=SCHEDULED["total"])
    out = {"params": [], "norms": [], "lrs": []}
    for step in range(STEPS):
        for p, g in zip(params, grads[step]):
            p.grad = g.clone()
        if clip:
            norm = torch.nn.utils.clip_grad_norm_(params, MAX_NORM)
            out["norms"].append(float(str(np.float32(norm.item()))))
        out["lrs"].append(opt.param_groups[0]["lr"])
        opt.step()
        if sched:
            sched.step()
        out["params"].append(f32_list(flat(params)))
    state = [opt.state[p] for p in params]
    out["exp_avg"] = f32_list(flat([s["exp_avg"] for s in state]))
    out["exp_avg_sq"] = f32_list(flat([s["exp_avg_sq"] for s in state]))
    if not clip:
        del out["norms"]
    if not scheduled:
        del out["lrs"]
    return out


def schedule_multipliers(name, warmup, total):
    # With a base learning rate of 1 the scheduled rate is the multiplier itself.
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = transformers.get_scheduler(name, opt, num_warmup_steps=warmup,
                                       num_training_steps=total)
    values = []
    for _ in range(total + EXTRA_SCHEDULE_STEPS + 1):
        values.append(sched.get_last_lr()[0])
        opt.step()
        sched.step()
    return values


def main():
    generator = torch.Generator().manual_seed(1234)
    init = make_params(generator)
    grads = [[g * scale for g in make_params(generator)] for scale in GRAD_SCALES]
    golden = {
        "source": f"tools/make_optimizer_goldens.py, torch {torch.__version__}, "
                  f"transformers {transformers.__version__}",
        "adamw": {
            "lr": LR, "beta1": BETAS[0], "beta2": BETAS[1], "eps": EPS,
            "weight_decay": WEIGHT_DECAY, "max_norm": MAX_NORM,
            "shapes": SHAPES, "decay": DECAY,
            "init": f32_list(flat(init)),
            "grads": [f32_list(flat(g)) for g in grads],
            "scheduled": SCHEDULED,
            "cases": {
                "plain": run_case(init, grads, clip=False, scheduled=False),
                "clipped": run_case(init, grads, clip=True, scheduled=False),
                "scheduled": run_case(init, grads, clip=False, scheduled=True),
            },
        },
        "schedules": [{"name": n, "warmup": w, "total": t,
                       "multipliers": schedule_multipliers(n, w, t)} for n, w, t in SCHEDULES],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(golden, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
