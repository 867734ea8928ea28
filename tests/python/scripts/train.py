"""A transformers fine-tuning script (run_clm.py's steps in a few lines), its import alone changed
(`from transformers import ...` -> `from tfm import ...`). Usage: train.py MODEL_DIR TEXT OUT"""
import sys

from datasets import Dataset
from tfm import (AutoModelForCausalLM, AutoTokenizer, DataCollatorForLanguageModeling, Trainer,
                 TrainingArguments)

model_dir, text_file, output_dir = sys.argv[1:4]
tokenizer = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir)
with open(text_file, encoding="utf-8") as f:
    paragraphs = [p for p in f.read().split("\n\n") if p.strip()][:200]
raw = Dataset.from_dict({"text": paragraphs})
tokenized = raw.map(lambda batch: tokenizer(batch["text"]), batched=True, remove_columns=["text"])
block_size = 64


def group_texts(examples):
    concatenated = sum(examples["input_ids"], [])
    total = len(concatenated) // block_size * block_size
    return {"input_ids": [concatenated[i:i + block_size] for i in range(0, total, block_size)]}


lm_dataset = tokenized.map(group_texts, batched=True, remove_columns=tokenized.column_names)
args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=4, max_steps=4,
                         learning_rate=2e-3, logging_steps=1, save_steps=0, report_to="none",
                         disable_tqdm=True)
trainer = Trainer(model=model, args=args, train_dataset=lm_dataset,
                  data_collator=DataCollatorForLanguageModeling(tokenizer=tokenizer, mlm=False))
result = trainer.train()
print(f"{len(lm_dataset)} {result.global_step} {result.training_loss:.6f}")
