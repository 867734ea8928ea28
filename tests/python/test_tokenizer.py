"""AutoTokenizer through Python: `tokenizers`' ids and decodings (the goldens), batches padded as
transformers pads them, the chat template, save_pretrained."""
import json
import os

import numpy as np
import pytest

import tfm
from conftest import FIXTURES, ROOT

TOKENIZERS = os.path.join(ROOT, "tests", "data", "tokenizers")


@pytest.fixture
def tokenizer(qwen3_tokenizer):
    return tfm.AutoTokenizer.from_pretrained(qwen3_tokenizer)


def goldens():
    with open(os.path.join(FIXTURES, "qwen3-tokenizer-golden.json")) as f:
        return json.load(f)


def test_ids_and_decodings_are_tokenizers(tokenizer):
    for case in goldens():
        ids = tokenizer(case["text"], add_special_tokens=False)["input_ids"]
        assert ids == case["ids"], case["text"]
        assert tokenizer.decode(case["ids"]) == case["decoded"]
        assert tokenizer.decode(np.array(case["ids"]), skip_special_tokens=True) == \
            case["decoded_skip_special"]


def load(name):
    with open(os.path.join(TOKENIZERS, "qwen3", name)) as f:
        return json.load(f)


@pytest.mark.parametrize("case", load("batch-golden.json"),
                         ids=lambda c: f"{c['padding_side']}-{sorted(c['options'].items())}")
def test_batches_are_padded_and_truncated_as_transformers_does(tokenizer, case):
    tokenizer.padding_side = case["padding_side"]
    enc = tokenizer(case["texts"], return_tensors="np", **case["options"])
    assert enc.input_ids.dtype == np.int64
    assert enc.input_ids.tolist() == case["input_ids"]
    assert enc.attention_mask.tolist() == case["attention_mask"]


def test_unequal_rows_without_padding_are_refused_as_transformers_refuses(tokenizer):
    with pytest.raises(ValueError, match="padding=True"):
        tokenizer(["a", "a much longer text than that"], return_tensors="np")


@pytest.mark.parametrize("case", load("chat-golden.json"), ids=lambda c: str(c["messages"])[:40])
def test_chat_template_is_transformers(tokenizer, case):
    kwargs = dict(add_generation_prompt=case["add_generation_prompt"],
                  enable_thinking=case["enable_thinking"])
    assert tokenizer.apply_chat_template(case["messages"], tokenize=False, **kwargs) == case["text"]
    ids = tokenizer.apply_chat_template(case["messages"], **kwargs)
    assert ids == case["ids"]
    assert tokenizer.batch_decode([ids, ids]) == [case["text"], case["text"]]


def test_save_pretrained_copies_what_loads_again(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    again = tfm.AutoTokenizer.from_pretrained(str(tmp_path))
    case = goldens()[0]
    assert again(case["text"], add_special_tokens=False)["input_ids"] == case["ids"]
