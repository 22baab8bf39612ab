"""Fixtures of the engine tests."""

from __future__ import annotations

import pytest

from ulorl.models import load_model, load_tokenizer


@pytest.fixture(scope="module")
def fresh(tiny_model_dir):
    """The tokenizer and the built-in model as created (logits of a realistic scale), one per test module."""
    return load_tokenizer(str(tiny_model_dir)), load_model(str(tiny_model_dir))
