"""The main job, ``python -m experiments.report``: the project's report with plots.

Writes ``<out>/REPORT.md``, ``<out>/results.json`` and PNG figures (default ``report/``), computed
in the run on embedded defaults, without a Tenstorrent chip:

1. golden parity (``golden_parity``): the JAX expert vs HF transformers, every attention algorithm
   vs the dense reference (sharded versions on fake CPU devices);
2. device precision (``device_precision``): the device-precision golden vs fp32, per layer and stack;
3. Blackhole cost model (``experiments.report.sections.blackhole``);
4. AHBM attention kernels (``experiments.ahbm_study``);
5. device parity (``sections.device_parity``, the run of ``device.parity``);
6. performance of the references (``performance``).

``runner`` holds the section list, failure isolation and the output files; see its docstring for
the section contract (``experiments.report.render.SectionResult``); tables and figures come from ``experiments.report.render``.
"""
