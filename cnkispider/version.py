"""The project's version: what `cnkispider --version` (and the .exe's) prints; pyproject.toml's
[project] version, kept equal by tests/test_cli_words.py. Imports nothing: any layer may read it."""

__version__ = "0.1.0"
