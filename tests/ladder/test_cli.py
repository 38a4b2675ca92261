"""The ladder's command (``tailtheory/ladder/cli.py``): its options name what the ladder offers."""

from __future__ import annotations

from tailtheory.ladder import effects as size


def test_the_ladder_command_offers_every_part():
    """Every part a named model can be measured with (the decide recipe's lives with its own
    warm starts, not a ladder model)."""
    from tailtheory.cli import build_parser
    from tailtheory.ladder import probes

    sub = next(a for a in build_parser()._actions if hasattr(a, "choices") and
               isinstance(a.choices, dict) and "ladder" in a.choices)
    part = next(a for a in sub.choices["ladder"]._actions if "--part" in a.option_strings)
    assert tuple(part.choices) == tuple(p for p in size.PARTS if p != "lopti_decide")
    assert set(probes.PARTS) <= set(part.choices)
