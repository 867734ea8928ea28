"""The Python package's tests: `import tfm` from the build tree (ctest sets PYTHONPATH), the
fixtures made by transformers + PyTorch as references."""
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "data", "fixtures")


def fixture_dir(arch):
    return os.path.join(FIXTURES, arch)


def reference(arch):
    with open(os.path.join(fixture_dir(arch), "reference.json")) as f:
        return json.load(f)


@pytest.fixture
def demo_model():
    return os.path.join(ROOT, "models", "shakespeare")


@pytest.fixture
def qwen3_tokenizer():
    return os.path.join(ROOT, "data", "qwen3-tokenizer")
