"""The main job, ``python -m experiments.report``: the project's report with plots.

Writes ``<out>/REPORT.md``, ``<out>/results.json`` and PNG figures (default ``report/``), computed
in the run on embedded defaults, without a Tenstorrent chip. The sections are the modules of
``experiments.report.sections``:

1. golden parity (``sections.golden_parity``): the JAX expert vs HF transformers, every attention
   algorithm vs the dense reference (sharded versions on fake CPU devices);
2. device precision (``sections.device_precision``): the device-precision golden vs fp32, per layer
   and stack;
3. Blackhole cost model (``sections.blackhole``);
4. AHBM attention kernels (``sections.ahbm``);
5. device parity (``sections.device_parity``, the run of ``device.parity``);
6. performance of the references (``sections.performance``).

``runner`` holds the one section table, failure isolation and the output files; see its docstring
for the section contract (``render.SectionResult``); tables and figures come from ``render``.
"""
