"""The verl plugin (``tailtheory.integrations.verl``) imports without verl (its tests against verl
run in ``make test-verl``)."""

from __future__ import annotations

import importlib.util

import pytest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("verl") is not None,
                                reason="verl is installed: tests_verl/ covers the plugin")


def test_imports_without_verl_and_registers_nothing():
    import tailtheory.integrations.verl as plugin

    assert plugin.method_params().alpha == 0.3            # the engine's default
    with pytest.raises(ModuleNotFoundError, match="verl"):
        plugin.register()


def test_unsupported_names_are_real_methods():
    """Every method the plugin does not register is an engine method, with a reason."""
    from tailtheory.engine.registry import registered
    from tailtheory.integrations.verl import LOSSES, UNSUPPORTED

    assert set(UNSUPPORTED) <= set(registered()) and all(UNSUPPORTED.values())
    assert not set(UNSUPPORTED) & set(LOSSES.values())
