"""A run's identity, marked once on the fields of ``TrainConfig`` (tailtheory.engine.config).

Each field outside some part of a run's identity carries ``metadata["identity"]``, one kind of
``IDENTITY``; the resume check, the run cache's key and a plot's group labels each name the kinds
they leave out. The pinned tuples below are the hand-kept lists these replaced: a new mark must
change one of them on purpose (the run cache's keys depend on ``NOT_IN_KEY``).
"""

from dataclasses import fields, replace

import pytest

from tailtheory.engine.config import IDENTITY, RESUME_FREE, TrainConfig, identity_fields
from tailtheory.experiments.plot import NOT_A_DIFFERENCE
from tailtheory.experiments.runs import NOT_IN_KEY


def test_resume_free_fields_are_the_pinned_ones():
    assert isinstance(RESUME_FREE, tuple) and len(set(RESUME_FREE)) == len(RESUME_FREE)
    assert set(RESUME_FREE) == {"steps", "out", "checkpoint_every", "dump_tokens", "threads",
                                "eval_every", "eval_n"}


def test_run_key_leaves_out_the_pinned_fields():
    assert isinstance(NOT_IN_KEY, tuple) and len(set(NOT_IN_KEY)) == len(NOT_IN_KEY)
    assert set(NOT_IN_KEY) == {"steps", "out", "checkpoint_every", "threads"}


def test_plot_groups_ignore_the_pinned_fields():
    assert isinstance(NOT_A_DIFFERENCE, tuple)
    assert len(set(NOT_A_DIFFERENCE)) == len(NOT_A_DIFFERENCE)
    assert set(NOT_A_DIFFERENCE) == {"seed", "out", "steps", "checkpoint_every", "threads",
                                     "dump_tokens"}


def test_every_mark_is_a_known_kind_and_each_field_has_at_most_one():
    marks = {f.name: f.metadata["identity"] for f in fields(TrainConfig)
             if "identity" in f.metadata}
    assert set(marks.values()) <= set(IDENTITY)
    assert marks == {"steps": "length", "seed": "replicate", "checkpoint_every": "place",
                     "dump_tokens": "output", "out": "place", "device": "machine",
                     "eval_every": "monitor", "eval_n": "monitor", "threads": "speed"}
    assert identity_fields(*IDENTITY) == tuple(marks)                    # field order


def test_unknown_kind_is_an_error():
    with pytest.raises(ValueError, match="unknown identity kind"):
        identity_fields("length", "colour")


def test_fingerprint_ignores_exactly_the_resume_free_fields():
    cfg = TrainConfig(model="tiny")
    free = dict(steps=7, out="elsewhere", checkpoint_every=3, dump_tokens=True, threads=2,
                eval_every=0, eval_n=5)
    assert set(free) == set(RESUME_FREE)
    assert replace(cfg, **free).fingerprint() == cfg.fingerprint()
    for name, value in (("seed", 1), ("device", "cpu"), ("lr", 1e-3)):
        assert replace(cfg, **{name: value}).fingerprint() != cfg.fingerprint(), name


def test_bad_thread_count_fails_when_the_config_is_built():
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="threads must be an integer >= 0"):
            TrainConfig(threads=bad)
