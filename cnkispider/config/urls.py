"""The database's and Redis's URLs made whole: a relative SQLite file made absolute beside
config.ini, and the TLS files of [database] and [redis] (``ssl_ca``, ``ssl_cert``, ``ssl_key``)
checked and written into the URL, where the drivers read them.
"""

from __future__ import annotations

from pathlib import Path

from cnkispider.exceptions import ConfigError
from cnkispider.words.i18n import _


def absolute_sqlite(url: str, base_dir: Path) -> str:
    """sqlite:///relative/path is taken relative to the config file's folder, not the cwd."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != "sqlite:///:memory:":
        relative = url[len(prefix) :]
        if not Path(relative).is_absolute():  # a Windows path like C:/... is already absolute
            return prefix + (base_dir / relative).as_posix()
    return url


class TlsFiles:
    """The ``ssl_ca``/``ssl_cert``/``ssl_key`` keys of [database] and [redis], checked (each file
    exists; a certificate comes with its key) and written into the URL's query, where the
    drivers read them: SQLAlchemy hands ``ssl_ca``/``ssl_cert``/``ssl_key`` to pymysql, redis-py
    takes ``ssl_ca_certs``/``ssl_certfile``/``ssl_keyfile`` of a ``rediss://`` URL. Every
    consumer of the URL (the crawl, status, web, the .exe) then speaks TLS alike. A URL that
    already carries these parameters keeps them."""

    REDIS_NAMES = {"ssl_ca": "ssl_ca_certs", "ssl_cert": "ssl_certfile", "ssl_key": "ssl_keyfile"}

    def __init__(self, values, sources, base_dir: Path):
        self.values, self.sources, self.base_dir = values, sources, base_dir

    def _files(self, section: str) -> dict[str, str]:
        files = {}
        for key in ("ssl_ca", "ssl_cert", "ssl_key"):
            raw = self.values[section][key].strip()
            if not raw:
                continue
            path = Path(raw).expanduser()
            path = path if path.is_absolute() else self.base_dir / path
            if not path.is_file():
                raise ConfigError(
                    self.sources[(section, key)],
                    section,
                    key,
                    _("no such file: %(path)s") % {"path": path},
                )
            files[key] = str(path)
        if ("ssl_cert" in files) != ("ssl_key" in files):
            given, missing = (
                ("ssl_cert", "ssl_key") if "ssl_cert" in files else ("ssl_key", "ssl_cert")
            )
            raise ConfigError(
                self.sources[(section, missing)],
                section,
                missing,
                _(
                    "is empty but %(given)s is set: a client certificate needs its key and the "
                    "key its certificate"
                )
                % {"given": given},
            )
        return files

    def _refused(self, section: str, files: dict[str, str], problem: str) -> ConfigError:
        """TLS files given where the URL cannot take them: the error names the first one."""
        key = next(iter(files))
        return ConfigError(self.sources[(section, key)], section, key, problem)

    def database_url(self, url: str) -> str:
        files = self._files("database")
        if not files:
            return url
        if url.startswith("sqlite"):
            raise self._refused(
                "database",
                files,
                _("TLS is for a MySQL/MariaDB server; the %(setting)s is SQLite (a file)")
                % {"setting": "[database] url"},
            )
        from sqlalchemy.engine import make_url

        parsed = make_url(url)
        return parsed.update_query_dict(
            {k: v for k, v in files.items() if k not in parsed.query}
        ).render_as_string(hide_password=False)

    def redis_url(self, url: str) -> str:
        files = self._files("redis")
        if not files:
            return url
        if not url.startswith("rediss://"):
            raise self._refused(
                "redis",
                files,
                _("TLS needs a %(scheme)s URL in %(setting)s (%(plain)s is plain text)")
                % {"scheme": "rediss://", "setting": "[redis] url", "plain": "redis://"},
            )
        from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

        parts = urlsplit(url)
        query = dict(parse_qsl(parts.query))
        for key, path in files.items():
            query.setdefault(self.REDIS_NAMES[key], path)
        return urlunsplit(parts._replace(query=urlencode(query)))
