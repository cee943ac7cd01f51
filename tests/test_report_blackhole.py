"""The Blackhole report section's override parsing. (Its contract, honoured overrides and numbers against
the model are checked on one command-line run in ``tests/test_report.py``.)"""

import pytest

from costmodel.hardware import blackhole_p150a
from experiments.report.sections.blackhole import hardware_with


def test_unknown_override_is_rejected():
    with pytest.raises(ValueError, match="'dram_gbps' is not a field of costmodel.hardware.Blackhole"):
        hardware_with({"blackhole.dram_gbps": 1.0})
    assert hardware_with({"ahbm.pe_clock_hz": 2e9}) == blackhole_p150a()
