"""Device side of the Blackhole port (ttnn). ttnn is imported lazily: nothing here imports it at module load.

``device/mock/blackhole_p150.yaml`` is a mock Blackhole p150 cluster descriptor; pointing
``TT_METAL_MOCK_CLUSTER_DESC_PATH`` at it lets ttnn's host-side converters run without a chip
(``open_device`` still fails, so no ttnn op produces numbers on a machine without a Blackhole).
"""

from pathlib import Path

MOCK_CLUSTER_DESC = Path(__file__).parent / "mock" / "blackhole_p150.yaml"
