"""cnkispider: a distributed crawler of CNKI's patents, papers and achievements."""

#: The version `cnkispider --version` (and the .exe's) prints; pyproject.toml's [project] version.
__version__ = "0.1.0"
