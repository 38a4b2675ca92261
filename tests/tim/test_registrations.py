"""``tailtheory/tim/registrations.py``: it imports every module of ``tailtheory/tim/`` that
registers something, and nothing else."""

from registrations_check import check_registrations


def test_registrations_name_every_registering_module():
    check_registrations("tim")
