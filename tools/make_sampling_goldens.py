"""Prints the goldens of tests/generation/sampling_test.cc: transformers' logits processors run on
a few fixed logit vectors (float32, CPU), as C++ array literals to paste into the test; and the
errors transformers' generate() raises for settings it refuses (on the qwen3 test fixture), as
C++ cases.

Needs: pip install torch transformers. Run: python3 tools/make_sampling_goldens.py
"""
import math
import os

import torch
import transformers
from transformers.generation.logits_process import (
    LogitsProcessorList, MinNewTokensLengthLogitsProcessor, RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

# Mixed signs, no ties: every processor's boundary falls between distinct values.
LOGITS = [1.5, -0.25, 3.0, 0.75, -2.0, 2.25, 0.0, -1.0, 1.0, 0.5]
# A tie at the top-k boundary (k = 3): both 2.0 entries stay.
TIED = [0.5, 2.0, -1.0, 3.0, 2.0, 1.0, -0.5, 0.25]
HISTORY = [1, 3, 3, 7, 0]  # repeated and negative-score ids
EOS = [2, 5]


def c_float(x):
    if math.isinf(x):
        return "-kInf" if x < 0 else "kInf"
    text = f"{x:.9g}"
    return text + ("f" if "." in text or "e" in text else ".f")


def emit(name, values):
    body = ", ".join(c_float(v) for v in values)
    print(f"constexpr float {name}[] = {{{body}}};")


def run(processor, logits, input_ids=HISTORY):
    ids = torch.tensor([input_ids], dtype=torch.long)
    scores = torch.tensor([logits], dtype=torch.float32)
    return processor(ids, scores)[0].tolist()


def main():
    print(f"// transformers {transformers.__version__}, torch {torch.__version__}")
    emit("kRepetition1_3", run(RepetitionPenaltyLogitsProcessor(1.3), LOGITS))
    emit("kRepetition0_5", run(RepetitionPenaltyLogitsProcessor(0.5), LOGITS))
    emit("kTopK3", run(TopKLogitsWarper(3), LOGITS))
    emit("kTopK1", run(TopKLogitsWarper(1), LOGITS))
    emit("kTopK20", run(TopKLogitsWarper(20), LOGITS))
    emit("kTiedTopK3", run(TopKLogitsWarper(3), TIED))
    emit("kTopP0_5", run(TopPLogitsWarper(0.5), LOGITS))
    emit("kTopP0_9", run(TopPLogitsWarper(0.9), LOGITS))
    emit("kTopP0_99", run(TopPLogitsWarper(0.99), LOGITS))
    emit("kTopP0_01", run(TopPLogitsWarper(0.01), LOGITS))
    emit("kTemperature0_7", run(TemperatureLogitsWarper(0.7), LOGITS))
    emit("kTemperature1_5", run(TemperatureLogitsWarper(1.5), LOGITS))
    # Prompt of 5 ids; 1 new token so far (masked), then 3 new tokens (not masked) of min 3.
    min_new = MinNewTokensLengthLogitsProcessor(prompt_length_to_skip=5, min_new_tokens=3,
                                                eos_token_id=EOS)
    emit("kMinNewAfter1", run(min_new, LOGITS, HISTORY + [4]))
    emit("kMinNewAfter3", run(min_new, LOGITS, HISTORY + [4, 6, 8]))
    # The order generate() builds them in: penalties and min_new_tokens, then the warpers.
    pipeline = LogitsProcessorList([
        RepetitionPenaltyLogitsProcessor(1.2),
        MinNewTokensLengthLogitsProcessor(prompt_length_to_skip=5, min_new_tokens=2,
                                          eos_token_id=EOS),
        TemperatureLogitsWarper(0.8), TopKLogitsWarper(6), TopPLogitsWarper(0.9)])
    emit("kPipeline", run(pipeline, LOGITS, HISTORY + [9]))


# Settings generate() refuses (and some it accepts: those print "accepted"), as the C++ test names
# them: GenerationConfig fields.
REFUSALS = [
    ("do_sample = true, temperature = NaN", dict(do_sample=True, temperature=float("nan"))),
    ("do_sample = true, temperature = 0", dict(do_sample=True, temperature=0.0)),
    ("repetition_penalty = 0", dict(repetition_penalty=0.0)),
    ("repetition_penalty = -1", dict(repetition_penalty=-1.0)),
    ("do_sample = true, top_k = -3", dict(do_sample=True, top_k=-3)),
    ("do_sample = true, top_p = -0.5", dict(do_sample=True, top_p=-0.5)),
    ("max_new_tokens = 0", dict(max_new_tokens=0)),
    ("do_sample = false, temperature = NaN, top_k = -3", dict(temperature=float("nan"), top_k=-3)),
    ("do_sample = true, top_p = 1.5", dict(do_sample=True, top_p=1.5)),
]


def refusals():
    fixture = os.path.join(os.path.dirname(__file__), "..", "tests", "data", "fixtures", "qwen3")
    model = transformers.AutoModelForCausalLM.from_pretrained(fixture)
    for name, settings in REFUSALS:
        kwargs = dict(max_new_tokens=2, pad_token_id=0)
        kwargs.update(settings)
        try:
            model.generate(torch.tensor([[5, 6, 7]]), **kwargs)
            message = "accepted"
        except ValueError as e:
            message = str(e)
        print(f'    {{"{name}", "{message}"}},')


if __name__ == "__main__":
    main()
    refusals()
