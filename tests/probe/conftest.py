"""Checkpoints as users bring them (tests/checkpoints.py), made once per session."""

import pytest


@pytest.fixture(scope="session")
def user_ckpt(tmp_path_factory):
    from tests.checkpoints import user_checkpoint

    return user_checkpoint(tmp_path_factory.mktemp("ckpt") / "user")


@pytest.fixture(scope="session")
def qwen_ckpt(tmp_path_factory):
    from tests.checkpoints import qwen_vocab_checkpoint

    return qwen_vocab_checkpoint(tmp_path_factory.mktemp("ckpt") / "qwen")
