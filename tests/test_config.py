"""config.ini: lookup order, environment overrides, and clear errors for bad input."""

from __future__ import annotations

import pytest

from cnkispider.config import load_config
from cnkispider.exceptions import ConfigError


def write(tmp_path, text, name="config.ini"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_apply_without_a_file(tmp_path, monkeypatch):
    """No config.ini in the working folder nor beside the program (the repository's own is
    hidden: it would be found beside cnkispider/): every key takes its schema default."""
    import cnkispider.config.reader as config_module  # find_config looks beside the program

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config_module, "executable_dir", lambda: tmp_path / "program")
    config = load_config(environ={})
    assert config.path is None
    for section, keys in config_module.SCHEMA.items():
        for key, (convert, default) in keys.items():
            assert config.raw[section][key] == convert(default), (section, key)
    assert config.cnki["page_size"] == 50 and config.redis_url == ""


def test_shipped_config_ini_is_valid():
    """The config.ini in the repository loads with no error (every key in it is known)."""
    from pathlib import Path

    config = load_config(Path(__file__).resolve().parents[1] / "config.ini", environ={})
    assert config.task.type == "patent"


def test_unknown_key_names_file_section_and_key(tmp_path):
    path = write(tmp_path, "[database]\nurll = sqlite:///x.db\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    message = str(err.value)
    assert (
        str(path) in message and "[database] urll" in message and "expected one of url" in message
    )


def test_unknown_section_is_named(tmp_path):
    path = write(tmp_path, "[databse]\nurl = sqlite:///x.db\n")
    with pytest.raises(ConfigError, match=r"\[databse\]: unknown section"):
        load_config(path, environ={})


@pytest.mark.parametrize(
    ("section", "key", "value", "expected"),
    [
        ("cnki", "page_size", "fifty", "expected a whole number"),
        ("cnki", "page_size", "80", "expected one of 10, 20, 50"),
        ("cnki", "page_size", "30", "expected one of 10, 20, 50"),
        ("cnki", "category_mode", "sidebar", "expected one of subject, facet"),
        ("cnki", "category_operator", "SUFFIX;x", "expected a code"),
        ("cnki", "client_id_url", "", "must not be empty"),
        ("task", "type", "thesis", "expected one of patent, paper, achievement"),
        ("task", "start_date", "2024-02-30", "expected a date as YYYY-MM-DD"),
        ("proxy", "enabled", "maybe", "expected true or false"),
        ("database", "url", "postgres://x", "expected a database URL"),
        ("redis", "url", "localhost:6379", "expected empty (embedded Redis)"),
    ],
)
def test_malformed_value_says_what_was_expected(tmp_path, section, key, value, expected):
    path = write(tmp_path, f"[{section}]\n{key} = {value}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path, environ={})
    assert f"[{section}] {key}" in str(err.value) and expected in str(err.value)


def test_environment_overrides_the_file_and_is_named_in_errors(tmp_path):
    path = write(tmp_path, "[cnki]\npage_size = 20\n")
    assert load_config(path, environ={"CNKI_CNKI_PAGE_SIZE": "10"}).cnki["page_size"] == 10
    with pytest.raises(ConfigError, match=r"\$CNKI_CNKI_PAGE_SIZE: \[cnki\] page_size"):
        load_config(path, environ={"CNKI_CNKI_PAGE_SIZE": "x"})


def test_explicit_path_wins_over_working_directory(tmp_path, monkeypatch):
    write(tmp_path, "[task]\nname = from-cwd\n")
    other = tmp_path / "elsewhere"
    other.mkdir()
    explicit = write(other, "[task]\nname = explicit\n")
    monkeypatch.chdir(tmp_path)
    assert load_config(environ={}).task.name == "from-cwd"
    assert load_config(explicit, environ={}).task.name == "explicit"


def test_missing_explicit_file_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.ini", environ={})


def test_relative_sqlite_path_is_beside_the_config_file(tmp_path, monkeypatch):
    path = write(tmp_path, "[database]\nurl = sqlite:///data/cnki.db\n")
    monkeypatch.chdir("/")
    assert (
        load_config(path, environ={}).database_url
        == f"sqlite:///{(tmp_path / 'data/cnki.db').as_posix()}"
    )


def test_end_before_start_in_config_is_rejected(tmp_path):
    path = write(tmp_path, "[task]\nstart_date = 2024-02-01\nend_date = 2024-01-01\n")
    with pytest.raises(ConfigError, match=r"\[task\] end_date: is before start_date"):
        load_config(path, environ={})


def test_bom_written_by_notepad_is_accepted(tmp_path):
    path = tmp_path / "config.ini"
    path.write_bytes("\ufeff[task]\nname = 中文任务\n".encode())
    assert load_config(path, environ={}).task.name == "中文任务"


# -- the environment: CNKI_* variables that override nothing ----------------------------------


def test_an_unknown_key_of_a_known_section_in_the_environment_is_an_error_naming_it(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, ""), environ={"CNKI_DATABASE_URLL": "sqlite:///x.db"})
    message = str(err.value)
    assert "$CNKI_DATABASE_URLL: [database] urll: unknown key" in message
    assert "did you mean CNKI_DATABASE_URL?" in message


def test_another_unknown_cnki_variable_is_a_warning_naming_it_and_the_nearest(tmp_path, caplog):
    with caplog.at_level("WARNING", logger="cnkispider.config"):
        load_config(
            write(tmp_path, ""), environ={"CNKI_REDISURL": "redis://x", "CNKI_BASE_URL": "http://x"}
        )
    messages = [r.getMessage() for r in caplog.records]
    assert any(
        "CNKI_REDISURL is not a cnkispider setting" in m and "CNKI_REDIS_URL" in m for m in messages
    )
    assert any("CNKI_BASE_URL" in m and "CNKI_CNKI_BASE_URL" in m for m in messages)


def test_the_variables_that_are_ours_without_being_keys_are_not_warned_about(tmp_path, caplog):
    environ = {
        "CNKI_CONFIG": "x",
        "CNKI_RELOAD_WATCH": "x",
        "CNKI_TEST_FAIL_FILENAMES": "x",
        "CNKI_DATABASE_OUTAGE_SECONDS": "30",
        "PATH": "/bin",
    }
    with caplog.at_level("WARNING", logger="cnkispider.config"):
        config = load_config(write(tmp_path, ""), environ=environ)
    assert not caplog.records and config.raw["database"]["outage_seconds"] == 30.0


# -- secrets never shown ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "value", "shown"),
    [
        ("database", "postgresql://bob:s3cret@db/cnki", "postgresql://bob:***@db/cnki"),
        ("database", "postgresql://bob@db/cnki?password=s3cret", "password=%2A%2A%2A"),
        ("redis", "http://:s3cret@r:6379/0", "http://:***@r:6379/0"),
        ("proxy", "ftp://api.example.com/get?key=s3cret", "key=%2A%2A%2A"),
    ],
)
def test_a_config_error_never_repeats_a_password(tmp_path, section, value, shown):
    key = "api_url" if section == "proxy" else "url"
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, f"[{section}]\n{key} = {value}\n"), environ={})
    assert "s3cret" not in str(err.value) and shown in str(err.value)


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("mysql+pymysql://u:pw-1@h:3306/d", "mysql+pymysql://u:***@h:3306/d"),
        (
            "mysql+pymysql://u@h/d?charset=utf8mb4&password=pw-1",
            "mysql+pymysql://u@h/d?charset=utf8mb4&password=%2A%2A%2A",
        ),
        ("redis://h:6379/0?PassWord=pw-1&db=2", "redis://h:6379/0?PassWord=%2A%2A%2A&db=2"),
        (
            "https://api.example.com/get?token=pw-1&num=5",
            "https://api.example.com/get?token=%2A%2A%2A&num=5",
        ),
        ("sqlite:////data/cnki.db", "sqlite:////data/cnki.db"),
        ("redis://h:notaport/0", "<unparseable URL>"),
    ],
)
def test_the_one_masking_helper(url, masked):
    from cnkispider.config.masking import mask_url

    assert mask_url(url) == masked


def test_scrapys_settings_log_line_is_masked(caplog):
    """Scrapy logs every overridden setting when a crawler starts, DATABASE_URL among them."""
    import logging
    import pprint

    from cnkispider.config.masking import install_log_filter

    install_log_filter()
    settings = {
        "DATABASE_URL": "mysql+pymysql://u@h/d?password=pw-1",
        "REDIS_URL": "redis://:pw-2@h:6379/0",
    }
    with caplog.at_level("INFO", logger="scrapy.crawler"):
        logging.getLogger("scrapy.crawler").info(
            "Overridden settings:\n%(settings)s", {"settings": pprint.pformat(settings)}
        )
    text = caplog.text
    assert "pw-1" not in text and "pw-2" not in text and "redis://:***@h:6379/0" in text


# -- what a worker runs --------------------------------------------------------------------------


def test_workers_open_no_remote_shell_and_take_the_outage_time_from_config(tmp_path):
    from scrapy.exceptions import NotConfigured
    from scrapy.extensions.telnet import TelnetConsole
    from scrapy.utils.test import get_crawler

    from cnkispider import settings as project_settings
    from cnkispider.launch.crawlsettings import crawler_settings

    config = load_config(write(tmp_path, "[database]\noutage_seconds = 90\n"), environ={})
    settings = crawler_settings(config)
    assert (
        settings["TELNETCONSOLE_ENABLED"] is False and settings["REMOTE_CONTROL_ENABLED"] is False
    )
    assert settings["DATABASE_OUTAGE_SECONDS"] == 90.0
    # nor loaded: the remote control's module imports aiohttp, 0.14 s of each worker's start
    from scrapy.settings import Settings

    ours = {k: v for k, v in vars(project_settings).items() if k.isupper()}
    listed = Settings({**ours, **settings}).getwithbase("EXTENSIONS")
    assert not {"scrapy.extensions.telnet.TelnetConsole", "scrapy.extensions.remote_control.RemoteControl"} & set(listed)  # fmt: skip
    assert "scrapy.extensions.logstats.LogStats" in listed  # Scrapy's others stay
    crawler = get_crawler(
        settings_dict={k: settings[k] for k in ("TELNETCONSOLE_ENABLED", "REMOTE_CONTROL_ENABLED")}
    )
    with pytest.raises(NotConfigured):
        TelnetConsole.from_crawler(crawler)
    try:
        from scrapy.extensions.remote_control import RemoteControl
    except ImportError:  # an older Scrapy has no remote control to switch off
        return
    with pytest.raises(NotConfigured):
        RemoteControl.from_crawler(crawler)


# -- one home for each default (cnkispider/default_settings.py) ---------------------------------


def test_config_ini_defaults_are_the_settings_defaults(tmp_path, monkeypatch):
    """Without a file, every setting config.ini maps onto holds its default from
    default_settings (the few derived from others or made absolute excepted)."""
    import cnkispider.config.reader as config_module  # find_config looks beside the program
    from cnkispider import default_settings
    from cnkispider.launch.crawlsettings import crawler_settings

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(config_module, "executable_dir", lambda: tmp_path / "program")
    settings = crawler_settings(load_config(environ={}))
    derived = {"SCHEDULER_NAMESPACE", "CNKI_DATA_DIR", "DATABASE_URL"}  # per task, absolute
    mapped = {name for name in settings if hasattr(default_settings, name)} - derived
    assert len(mapped) > 40
    assert {name: settings[name] for name in mapped} == {
        name: getattr(default_settings, name) for name in mapped
    }


def test_the_add_on_installs_every_default_below_the_project_settings(tmp_path):
    """A crawler of the project gets every default at the add-on's priority; config.ini's
    values (project priority) win over them, Scrapy's own defaults lose."""
    from scrapy.settings import SETTINGS_PRIORITIES
    from scrapy.utils.test import get_crawler

    from cnkispider import default_settings
    from cnkispider.launch.crawlsettings import crawler_settings

    config = load_config(write(tmp_path, "[cnki]\nturn_limit = 7\n"), environ={})
    settings = get_crawler(settings_dict=crawler_settings(config)).settings
    names = [name for name in vars(default_settings) if name.isupper()]
    unmapped = [
        name for name in names if settings.getpriority(name) == SETTINGS_PRIORITIES["addon"]
    ]
    assert settings.getint("SESSION_TURN_LIMIT") == 7
    assert settings.getint("RETRY_BACKOFF_MAX") == default_settings.RETRY_BACKOFF_MAX
    assert {name: settings[name] for name in unmapped} == {
        name: getattr(default_settings, name) for name in unmapped
    } and "PROXY_WAIT_MAX" in unmapped


def test_each_default_is_written_once():
    """No component reads a setting with a fallback of its own, and no module but
    default_settings keeps a table of defaults (a second home would drift from the first)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    fallback = re.compile(r"""settings\.get\w*\(\s*["'][A-Z_]+["']\s*,""")
    found = []
    for package in ("cnkispider", "tasks", "errors", "proxy"):
        for path in (root / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            found += [f"{path.relative_to(root)}: {m.group(0)}" for m in fallback.finditer(text)]
            found += [
                f"{path.relative_to(root)}: DEFAULTS"
                for _ in re.finditer(r"^DEFAULTS\b", text, re.M)
            ]
    assert found == []


def test_the_order_of_the_components_is_one_table_whatever_config_ini_switches_on(tmp_path):
    """config.ini switches components on and off, never moves one: every order a crawl gets is
    the table of cnkispider/settings.py, with the archive and the proxies off or on."""
    from cnkispider import settings as project
    from cnkispider.launch.crawlsettings import crawler_settings

    tables = ("DOWNLOADER_MIDDLEWARES", "SPIDER_MIDDLEWARES", "ITEM_PIPELINES", "EXTENSIONS")
    switched_on = (
        "[crawl]\narchive_html = true\n[proxy]\nenabled = true\nstatic = http://127.0.0.1:1\n"
    )
    for text in ("", switched_on):
        settings = crawler_settings(load_config(write(tmp_path, text), environ={}))
        assert {name: settings[name] for name in tables} == {
            name: getattr(project, name) for name in tables
        }


def test_redis_prefix_is_one_key_with_a_checked_value(tmp_path):
    """[redis] prefix (default cnki:) reaches every key name of a crawl; a prefix the worker
    ACL pattern could not hold names the file, the section and the key."""
    from cnkispider.launch.crawlsettings import crawler_settings

    base = "[redis]\nurl = redis://127.0.0.1:6379/0\n"
    assert load_config(write(tmp_path, base), environ={}).redis_prefix == "cnki:"
    config = load_config(write(tmp_path, base + "prefix = lab-2:\n"), environ={})
    settings = crawler_settings(config)
    assert config.redis_prefix == "lab-2:"
    assert settings["SCHEDULER_NAMESPACE"] == f"lab-2:{config.task.name}"
    assert settings["RATELIMIT_KEY_PREFIX"] == "lab-2:ratelimit"
    assert settings["REDIS_KEY_PREFIX"] == "lab-2:"
    for bad in ("cnki:*", "two words", ""):
        with pytest.raises(ConfigError) as raised:
            load_config(write(tmp_path, base + f"prefix = {bad}\n"), environ={})
        assert "[redis] prefix" in str(raised.value) and "config.ini" in str(raised.value)


class _Bracketed:
    """A catalogue that translates every word into itself between « and »."""

    def gettext(self, message):
        return f"«{message}»"

    def ngettext(self, singular, plural, count):
        return f"«{singular if count == 1 else plural}»"


@pytest.mark.parametrize(
    "text, environ, where",
    [
        ("[crawl]\nconcurrent_requests = x\n", {}, "[crawl] concurrent_requests"),
        ("[cnki]\npage_size = 30\n", {}, "[cnki] page_size"),
        ("[bogus]\n", {}, "[bogus]"),
        ("[crawl]\nfoo = 1\n", {}, "[crawl] foo"),
        ("[crawl]\na = 1\na = 2\n", {}, "[-]"),
        ("[task]\nstart_date = 2024-02-01\nend_date = 2024-01-01\n", {}, "[task] end_date"),
        ("", {"CNKI_DATABASE_URLL": "x"}, "[database] urll"),
    ],
)
def test_a_config_error_is_in_the_language_of_the_moment_it_is_raised(
    tmp_path, monkeypatch, text, environ, where
):
    """Every problem of config.ini goes through the catalogue when it is found (the locale's
    language: [ui] language is read from the very file being checked), while the file, the
    section and the key stay as they are written."""
    from cnkispider.words import i18n

    path = write(tmp_path, text)
    monkeypatch.setattr(i18n, "translation", lambda language: _Bracketed())
    with pytest.raises(ConfigError) as error:
        load_config(path, environ=environ)
    head, problem = str(error.value).split(f"{where}: ", 1)
    assert head.rstrip(": ") in (str(path), "$CNKI_DATABASE_URLL")
    assert problem.startswith("«") and problem.endswith("»"), problem
