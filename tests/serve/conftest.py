"""`tfm serve` driven by real clients: PyPI's openai package and raw HTTP. The server runs the
shipped demo model (a copy whose tokenizer_config.json adds a chat template) on a free loopback
port. References: `tfm generate` (greedy ids, itself checked against transformers), PyPI's
tokenizers and jinja2 (prompt token counts as transformers renders and counts them)."""
import json
import os
import shutil
import subprocess
import threading

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEMO = os.path.join(ROOT, "models", "shakespeare")
TFM = os.environ.get("TFM_BIN", os.path.join(ROOT, "build", "tfm"))
# The play's own layout: a speaker's name, a colon, the line.
CHAT_TEMPLATE = ("{% for message in messages %}{{ message['content'] }}\n\n{% endfor %}"
                 "{% if add_generation_prompt %}ROMEO:\n{% endif %}")


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory):
    """The demo model with a chat template."""
    d = tmp_path_factory.mktemp("demo-chat")
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        shutil.copy(os.path.join(DEMO, name), d / name)
    with open(os.path.join(DEMO, "tokenizer_config.json")) as f:
        config = json.load(f)
    config["chat_template"] = CHAT_TEMPLATE
    (d / "tokenizer_config.json").write_text(json.dumps(config))
    return str(d)


class Server:
    def __init__(self, model_dir, *extra, max_num_seqs=8):
        self.process = subprocess.Popen(
            [TFM, "serve", model_dir, "--port", "0", "--served-model-name", "demo",
             "--max-num-seqs", str(max_num_seqs), "--device", "cpu", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.log = []
        line = self.process.stdout.readline()
        if "ready on" not in line:
            self.process.kill()
            raise RuntimeError("tfm serve did not start: " + line + self.process.stderr.read())
        self.url = line.split("ready on ")[1].strip()
        # Drain stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: self.log.extend(self.process.stderr), daemon=True).start()

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)


@pytest.fixture(scope="session")
def server(model_dir):
    s = Server(model_dir)
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="session")
def generate(model_dir):
    """`tfm generate`'s greedy continuation of a prompt: (text, new ids)."""
    cache = {}

    def run(prompt, max_new_tokens, chat=False):
        key = (prompt, max_new_tokens, chat)
        if key not in cache:
            args = [TFM, "generate", model_dir, prompt, "--max-new-tokens", str(max_new_tokens),
                    "--print-ids", "--quiet", "--device", "cpu"]
            out = subprocess.run(args + (["--chat"] if chat else []), check=True,
                                 capture_output=True, text=True).stdout
            text, ids_line = out.rsplit("\n", 2)[0], out.rsplit("\n", 2)[1]
            cache[key] = (text, json.loads(ids_line))
        return cache[key]
    return run
