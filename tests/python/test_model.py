"""AutoModelForCausalLM through Python: the fixtures' logits and greedy ids as transformers gave
them, NumPy in and out, torch tensors through DLPack where torch is installed."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import tfm
from conftest import fixture_dir, reference


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama", "mistral", "mixtral", "qwen3-moe"])
def test_logits_and_greedy_ids_are_transformers(arch):
    ref = reference(arch)
    model = tfm.AutoModelForCausalLM.from_pretrained(fixture_dir(arch), dtype="float32",
                                                     device_map="cpu")
    logits = model(np.array(ref["input_ids"])).logits
    assert logits.dtype == np.float32
    assert logits.shape == np.array(ref["logits"]).shape
    assert np.abs(logits - np.array(ref["logits"], dtype=np.float32)).max() < 1e-4
    out = model.generate(input_ids=np.array(ref["padded_input_ids"]),
                         attention_mask=np.array(ref["padded_attention_mask"]),
                         max_new_tokens=16, do_sample=False)
    assert out.tolist() == ref["greedy_16"]


def test_lists_and_int32_arrays_are_ids_too():
    ref = reference("qwen3")
    model = tfm.AutoModelForCausalLM.from_pretrained(fixture_dir("qwen3"), device_map="cpu")
    a = model(ref["input_ids"]).logits
    b = model(np.array(ref["input_ids"], dtype=np.int32)).logits
    assert np.array_equal(a, b)


def test_torch_tensors_in_and_out():
    torch = pytest.importorskip("torch")
    ref = reference("qwen3")
    model = tfm.AutoModelForCausalLM.from_pretrained(fixture_dir("qwen3"), device_map="cpu")
    logits = model(torch.tensor(ref["input_ids"])).logits
    assert isinstance(logits, torch.Tensor)
    assert torch.allclose(logits, torch.tensor(ref["logits"]), atol=1e-4)


def test_config_device_and_save_pretrained(tmp_path):
    model = tfm.AutoModelForCausalLM.from_pretrained(fixture_dir("qwen2"), device_map="cpu")
    with open(os.path.join(fixture_dir("qwen2"), "config.json")) as f:
        config = json.load(f)
    assert model.config.vocab_size == config["vocab_size"]
    assert model.config.to_dict()["hidden_size"] == config["hidden_size"]
    assert model.device == "cpu" and model.dtype == "float32"
    model.save_pretrained(tmp_path / "saved")
    again = tfm.AutoModelForCausalLM.from_pretrained(tmp_path / "saved", device_map="cpu")
    ids = np.array(reference("qwen2")["input_ids"])
    assert np.array_equal(again(ids).logits, model(ids).logits)


def test_torch_loads_after_tfm():
    # tfm opens NCCL only when a CUDA collective needs it, so PyTorch loaded after tfm brings its
    # own (a linked, older NCCL made `import torch` fail on a missing symbol).
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")
    script = "import tfm, torch; print(torch.ones(2).sum().item())"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2.0"
