"""The method registry (``tailtheory/engine/registry.py``): names and stages, spec parsing, the
discovery of each section's ``methods.py`` by name (the engine imports no section), and the
hyperparameter checks methods declare at registration. The stages applied to batches are
tested with the methods that fill them (``tests/engine/test_methods.py``,
``tests/<section>/test_methods.py``)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from policy_batches import HP
from tailtheory.engine import registry
from tailtheory.engine.methods import check_loss_params
from tailtheory.engine.registry import (STAGES, get_method, parse_methods, register,
                                        registered, validate_params)


def test_parse_methods_composes_and_rejects():
    spec = parse_methods("ar+lopti")
    assert spec.loss.name == "grpo" and spec.reweight.name == "ar"
    assert spec.schedule.name == "lopti" and spec.label == "grpo+ar+lopti"
    assert [m.name for m in parse_methods(["tis", "mis", "trm"]).corrections] == \
        ["tis", "mis", "trm"]
    assert parse_methods("dr_grpo+trm").loss.name == "dr_grpo"
    with pytest.raises(ValueError, match="valid methods: ar, dr_grpo, dvp"):
        parse_methods("ar+foo")
    for bad in ("lopti+lopti_reversed", "grpo+dr_grpo", "ar+ar", "ar+", ""):
        with pytest.raises(ValueError):
            parse_methods(bad)



def test_register_refuses_an_existing_name():
    """Two methods never share a name: registering ``tis`` again raises, the first one stays."""
    before = get_method("tis")
    with pytest.raises(ValueError, match="'tis' is already registered"):
        register("tis", "correction", "test")(lambda b, hp: (None, {}))
    assert get_method("tis") is before


def test_unknown_method_lists_the_valid_names():
    with pytest.raises(ValueError, match="unknown method 'nope'; valid methods: ar, dr_grpo, dvp"):
        get_method("nope")


def test_registry_never_imports_the_methods():
    """No import cycle: the registry module imports neither ``engine/methods.py`` nor any
    section, at import time or later (its lookups load the package's catalog through its entry
    point group)."""
    import ast
    import inspect

    from tailtheory.catalog import SECTIONS

    tree = ast.parse(inspect.getsource(registry))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "tailtheory.engine.methods" not in imported
    assert not any(m and m.startswith("tailtheory.engine.methods") for m in imported)
    assert not any(m and m.split(".")[:2] == ["tailtheory", s] for m in imported for s in SECTIONS)


def test_registry_finds_each_sections_methods_through_the_catalog():
    """A fresh interpreter: importing the registry loads no section; the first lookup loads the
    catalog, which imports the engine's methods and ``tailtheory.<section>.methods`` of each
    section that has one, and every method is registered by the module of its own section."""
    code = ("import sys; from tailtheory.engine import registry as r; "
            "sec = lambda: sorted(m for m in sys.modules if m.startswith('tailtheory.') and "
            "m.split('.')[1] not in ('core', 'engine')); before = sec(); ms = r.registered(); "
            "print(before); print(sorted(m for m in sec() if m.endswith('.methods'))); "
            "print(sorted({k: v.fn.__module__ for k, v in ms.items()}.items()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == "[]"
    assert out[1] == str(sorted(f"tailtheory.{s}.methods"
                                for s in ("lopti", "otb", "pruning", "tim", "trm")))
    owner = dict(eval(out[2]))
    assert owner["grpo"] == owner["dr_grpo"] == "tailtheory.engine.methods"
    section = {"ar": "lopti", "lopti": "lopti", "lopti_reversed": "lopti", "upweight": "lopti",
               "top_entropy": "lopti", "random_tokens": "lopti", "dvp": "pruning",
               "trm": "trm", "otb": "otb", "tis": "tim", "seq_tis": "tim", "mis": "tim",
               "seq_reject": "tim", "geo_reject": "tim", "icepop": "tim", "token_reject": "tim"}
    for name, sec in section.items():
        assert owner[name] == f"tailtheory.{sec}.methods", name


def test_validate_params_runs_every_registered_check_once():
    """Each distinct check runs once per call (the TIM corrections share one), whatever method a
    config names; a method that registers without one adds nothing."""
    methods = dict(registered())
    distinct = list(dict.fromkeys(m.validate for m in methods.values() if m.validate))
    assert len(distinct) < sum(m.validate is not None for m in methods.values())  # shared
    assert methods["otb"].validate is None
    assert methods["grpo"].validate is methods["dr_grpo"].validate is check_loss_params
    calls = []
    wrap = {f: (lambda hp, f=f: calls.append(f) or f(hp)) for f in distinct}
    try:
        for name, m in methods.items():
            if m.validate is not None:
                registry._METHODS[name] = replace(m, validate=wrap[m.validate])
        validate_params(HP)
    finally:
        registry._METHODS.update(methods)
    assert sorted(map(id, calls)) == sorted(map(id, distinct))


def test_register_takes_a_check_and_rejects_a_bad_stage():
    with pytest.raises(ValueError, match="stage must be one of"):
        register("x_bad_stage", "nowhere", "test")
    with pytest.raises(ValueError, match="namespaced"):
        register("x_bad_metric", "loss", "test", metrics=("plain",))
    assert "x_bad_stage" not in registered() and "x_bad_metric" not in registered()


def test_every_method_has_a_stage_and_the_spec_orders_them():
    """Every registered method sits at one of :data:`STAGES`; a spec lists its methods in stage
    order whatever order it was written in, with the default loss first in its label."""
    assert {m.stage for m in registered().values()} <= set(STAGES)
    spec = parse_methods("lopti+tis+ar+otb+dvp")
    assert [m.name for m in spec.methods] == ["dvp", "otb", "ar", "tis", "lopti", "grpo"]
    assert spec.label == "grpo+lopti+tis+ar+otb+dvp"
    assert spec.metric_keys >= {"dvp/kept_vocab", "ar/scale_mean", "loss/policy"}
