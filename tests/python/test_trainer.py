"""TrainingArguments and Trainer through Python: the first step's loss is transformers' on the
fixture batch, and a run from a JSONL path, from texts and from a datasets.Dataset logs what
`tfm train` logs with the same arguments."""
import json
import os
import signal
import subprocess
import threading

import numpy as np
import pytest

import tfm
from conftest import fixture_dir, reference


def logged(output_dir, key="loss"):
    with open(os.path.join(output_dir, "logs.jsonl")) as f:
        return [json.loads(line) for line in f if key in json.loads(line)]


def test_first_loss_is_transformers(tmp_path):
    ref = reference("qwen3")
    model = tfm.AutoModelForCausalLM.from_pretrained(fixture_dir("qwen3"), dtype="float32",
                                                     device_map="cpu")
    args = tfm.TrainingArguments(output_dir=tmp_path / "out", per_device_train_batch_size=2,
                                 max_steps=1, logging_steps=1, save_steps=0, disable_tqdm=True,
                                 report_to="none")
    trainer = tfm.Trainer(model=model, args=args, train_dataset=ref["input_ids"], max_length=12)
    out = trainer.train()
    assert out.global_step == 1
    assert logged(tmp_path / "out")[0]["loss"] == pytest.approx(ref["train_loss0"], rel=1e-5)


ARGS = dict(per_device_train_batch_size=2, max_steps=3, learning_rate=1e-2, max_grad_norm=1.0,
            logging_steps=1, save_steps=0, disable_tqdm=True)


def cli_run(tmp_path, data):
    out = tmp_path / "cli"
    command = [os.environ["TFM_BIN"], "train", "--model", fixture_dir("qwen3"), "--data", data,
               "--max_length", "8", "--output_dir", str(out), "--device", "cpu"]
    for name, value in ARGS.items():
        command += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    subprocess.run(command, check=True, capture_output=True)
    return logged(out)


@pytest.fixture
def rows(tmp_path):
    path = tmp_path / "rows.jsonl"
    with open(path, "w") as f:
        for i in range(6):
            f.write(json.dumps({"input_ids": [5 + i, 6, 7, 8, 9, 10 - i, 11, 12]}) + "\n")
    return path


@pytest.mark.skipif("TFM_BIN" not in os.environ, reason="TFM_BIN is not set (run via ctest)")
@pytest.mark.parametrize("source", ["path", "lists", "dataset"])
def test_a_run_logs_what_tfm_train_logs(tmp_path, rows, source):
    want = cli_run(tmp_path, str(rows))
    if source == "path":
        data = str(rows)
    else:
        with open(rows) as f:
            data = [json.loads(line)["input_ids"] for line in f]
        if source == "dataset":
            datasets = pytest.importorskip("datasets")
            data = datasets.Dataset.from_dict({"input_ids": data})
    model = tfm.AutoModelForCausalLM.from_pretrained(fixture_dir("qwen3"), device_map="cpu")
    args = tfm.TrainingArguments(output_dir=tmp_path / "py", **ARGS)
    out = tfm.Trainer(model=model, args=args, train_dataset=data, max_length=8).train()
    got = logged(tmp_path / "py")
    assert [g["loss"] for g in got] == [w["loss"] for w in want]
    assert [g["grad_norm"] for g in got] == [w["grad_norm"] for w in want]
    assert out.global_step == 3
    saved = tfm.AutoModelForCausalLM.from_pretrained(tmp_path / "py", device_map="cpu")
    assert saved.config.vocab_size == model.config.vocab_size


def test_texts_train_with_the_tokenizer(tmp_path, demo_model):
    tokenizer = tfm.AutoTokenizer.from_pretrained(demo_model)
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    texts = ["ROMEO: What light through yonder window breaks?", "JULIET: O Romeo, Romeo."] * 4
    args = tfm.TrainingArguments(output_dir=tmp_path / "out", per_device_train_batch_size=2,
                                 max_steps=2, logging_steps=1, save_steps=0, disable_tqdm=True)
    trainer = tfm.Trainer(model=model, args=args, train_dataset=texts, eval_dataset=texts[:2],
                          processing_class=tokenizer, max_length=8)
    trainer.train()
    losses = [entry["loss"] for entry in logged(tmp_path / "out")]
    assert len(losses) == 2 and all(loss > 0 for loss in losses)
    assert trainer.evaluate()["eval_loss"] > 0
    assert os.path.exists(tmp_path / "out" / "tokenizer.json")


def test_ctrl_c_ends_a_run_after_its_step(tmp_path, demo_model):
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    args = tfm.TrainingArguments(output_dir=tmp_path / "out", per_device_train_batch_size=8,
                                 max_steps=10000, logging_steps=1, save_steps=0,
                                 disable_tqdm=True)
    rows = [[5 + i % 50] * 64 for i in range(64)]
    trainer = tfm.Trainer(model=model, args=args, train_dataset=rows)
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    timer.join()
    steps = [entry["step"] for entry in logged(tmp_path / "out")]
    assert len(steps) < 10000 and steps == list(range(1, len(steps) + 1))
    assert model(np.array([[5, 6, 7]])).logits.shape == (1, 3, model.config.vocab_size)
