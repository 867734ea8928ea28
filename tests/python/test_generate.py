"""generate() through Python as transformers' scripts call it: a TextIteratorStreamer read on
another thread gives the text of the ids generate() returns; a TextStreamer prints it."""
import os
import signal
import threading

import numpy as np
import pytest

import tfm


def test_text_iterator_streamer_gives_the_generated_text(demo_model):
    tokenizer = tfm.AutoTokenizer.from_pretrained(demo_model)
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    inputs = tokenizer(["ROMEO:"], return_tensors="np")
    streamer = tfm.TextIteratorStreamer(tokenizer, skip_prompt=True)
    result = {}

    def run():
        result["ids"] = model.generate(**inputs, streamer=streamer, max_new_tokens=40)

    thread = threading.Thread(target=run)
    thread.start()
    text = "".join(streamer)
    thread.join()
    new = result["ids"][0, inputs["input_ids"].shape[1]:]
    assert len(new) > 0
    assert text == tokenizer.decode(new)


def test_text_streamer_prints_prompt_and_continuation(demo_model, capsys):
    tokenizer = tfm.AutoTokenizer.from_pretrained(demo_model)
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    inputs = tokenizer("ROMEO:", return_tensors="np")
    ids = model.generate(**inputs, streamer=tfm.TextStreamer(tokenizer), max_new_tokens=12)
    assert capsys.readouterr().out == tokenizer.decode(ids[0]) + "\n"


def test_sampling_with_a_seed_repeats(demo_model):
    tokenizer = tfm.AutoTokenizer.from_pretrained(demo_model)
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    inputs = tokenizer("ROMEO:", return_tensors="np")
    runs = [model.generate(**inputs, do_sample=True, temperature=0.8, top_k=50, top_p=0.9,
                           seed=7, max_new_tokens=16) for _ in range(2)]
    assert np.array_equal(runs[0], runs[1])


def test_ctrl_c_stops_generate_and_the_model_runs_on(demo_model):
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    ids = np.full((64, 4), 5)
    # 64 rows x 200 tokens take seconds: SIGINT comes while the GIL is free in C++.
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        model.generate(ids, max_new_tokens=200)
    timer.join()
    assert model.generate(ids[:1], max_new_tokens=3).shape == (1, 7)


def test_a_generation_config_and_max_length(demo_model):
    model = tfm.AutoModelForCausalLM.from_pretrained(demo_model, device_map="cpu")
    ids = np.array([[5, 6, 7, 8]])
    config = tfm.GenerationConfig(max_new_tokens=3, min_new_tokens=3)
    assert model.generate(ids, generation_config=config).shape == (1, 7)
    assert model.generate(ids, max_length=10, min_new_tokens=6).shape == (1, 10)
    with pytest.raises(ValueError, match="num_beams"):
        tfm.GenerationConfig(num_beams=4)
