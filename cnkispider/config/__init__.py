"""config.ini: found, layered, validated once into one typed :class:`Config`.

A piece a concern, each named for what it does:

- :mod:`.reader`: the file found and read, the environment laid over it, every key checked, the
  one :class:`Config` (:func:`load_config`; :func:`language_hint` before the command line is
  parsed);
- :mod:`.keys`: the one table of every key of every section (:data:`SCHEMA`), with the parser of
  its value and its default (a Scrapy setting's, from :mod:`cnkispider.default_settings`);
- :mod:`.environment`: ``CNKI_<SECTION>_<KEY>`` variables, and the unknown ones refused or warned;
- :mod:`.task`: [task] read into one :class:`TaskConfig`, its keys checked together;
- :mod:`.urls`: the database's and Redis's URLs made whole (SQLite beside config.ini, TLS files).

A bad value raises one :class:`~cnkispider.exceptions.ConfigError` naming the file, the section,
the key and what was expected. What other modules import is here.
"""

from cnkispider.config.environment import ENV_PREFIX, check_environment, env_names
from cnkispider.config.keys import SCHEMA
from cnkispider.config.reader import (
    CONFIG_NAME,
    Config,
    executable_dir,
    find_config,
    language_hint,
    load_config,
)
from cnkispider.config.task import TaskConfig
from cnkispider.exceptions import ConfigError

__all__ = [
    "CONFIG_NAME",
    "ENV_PREFIX",
    "SCHEMA",
    "Config",
    "ConfigError",
    "TaskConfig",
    "check_environment",
    "env_names",
    "executable_dir",
    "find_config",
    "language_hint",
    "load_config",
]
