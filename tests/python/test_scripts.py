"""Scripts written for transformers run with only their import changed (tests/python/scripts)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def run(script, *args):
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *args],
                          capture_output=True, text=True, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_seed_generate_example(demo_model):
    pytest.importorskip("torch")
    out = run("generate.py", demo_model)
    assert out.startswith("The French Bread Law states")


def test_a_fine_tuning_script_trains_on_its_grouped_blocks(demo_model, tmp_path):
    text = os.path.join(ROOT, "data", "tinyshakespeare", "input.txt")
    blocks, steps, loss = run("train.py", demo_model, text, str(tmp_path)).splitlines()[-1].split()
    assert int(steps) == 4
    with open(tmp_path / "logs.jsonl") as f:
        losses = [json.loads(line)["loss"] for line in f if '"loss"' in line]
    assert len(losses) == 4 and float(loss) == pytest.approx(sum(losses) / 4, rel=1e-6)
    # The rows trained on are the script's 64-token blocks: the run's tokens are 4 steps of 4.
    with open(tmp_path / "logs.jsonl") as f:
        final = [json.loads(line) for line in f][-1]
    assert int(blocks) >= 16
    assert final["train_tokens_per_second"] * final["train_runtime"] == pytest.approx(
        4 * 4 * 64, rel=1e-3)
