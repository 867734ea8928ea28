"""The seed's generate example as a transformers script, its import alone changed
(`from transformers import ...` -> `from tfm import ...`). Usage: generate.py MODEL_DIR"""
import sys

import torch
from tfm import AutoModelForCausalLM, AutoTokenizer

tok = AutoTokenizer.from_pretrained(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.bfloat16, device_map="auto")
inputs = tok("The French Bread Law states", return_tensors="pt")
out = model.generate(**inputs, do_sample=False, max_new_tokens=50, cache_implementation="static")
print(tok.decode(out[0], skip_special_tokens=True))
