"""The report's tables: ``jaxref.render``'s (the one table type of the project), importable from here too."""

from jaxref.render import format_table, md_table

__all__ = ["format_table", "md_table"]
