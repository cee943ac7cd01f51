"""The report's figures: ``jaxref.render``'s helper (the one figure helper of the project), importable from here too."""

from jaxref.render import figure, save

__all__ = ["figure", "save"]
