"""The report's sections, one module per section (``experiments.report.runner.SECTIONS`` lists them).

Each section module exposes the report contract

    report_section(out_dir: pathlib.Path, *, quick: bool, overrides: dict[str, float]) -> SectionResult

The other modules here are parts of one section, named after it in their docstrings.
"""
