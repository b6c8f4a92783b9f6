"""The `cnkispider` command line (and the .exe's entry): ``main(argv=None)``.

    cnkispider init-db [--config PATH]      (--config anywhere on the line)
    cnkispider task add NAME --type patent --start 2024-01-01 [--end 2024-01-31] [--categories SPEC]
                    [--depth list|export|detail]
    cnkispider task list | show NAME | stop NAME | pause NAME | resume NAME [--end DATE]
    cnkispider task extend NAME [END]     a later end date (none: up to today)
    cnkispider task move NAME DATE [CODE]
    cnkispider run [--task NAME] [--processes N]   crawl the task of config.ini (or NAME), then
                                         its recrawl phase
    cnkispider recrawl                   only the recrawl phase (replay errorCode, errorLink)
    cnkispider task set NAME [--categories SPEC] [--type T] [--depth D]   (type: only before its first round)
    cnkispider run|recrawl [--verbose] [-s KEY=VALUE] [-o FILE]
    cnkispider demo                      the offline demo: the local stand-in site, crawled
    cnkispider status [--task NAME] [--watch [SECONDS]] [--json]   progress, errors, workers, queue
    cnkispider probe [--day DATE] [--delay 3] [--save DIR]   check CNKI's assumptions live (docs/PROBE.md)
    cnkispider export [--type T] [--format csv|jsonl|xlsx|ris|bibtex|endnote|csljson] [--since DATE] [--task NAME] [--out PATH]
    cnkispider session login [--browser PATH | --cdp PORT]   pass CNKI's check in a browser, keep it
    cnkispider session add --from-curl FILE|- | --cookie-string "a=1; b=2" | --cookie-file FILE
    cnkispider session list | remove ID | check [ID]
    cnkispider web [--host 127.0.0.1] [--port 8700]   the operator's page (cnkispider/web/)
    cnkispider admin grant-worker NAME [--apply]   a worker's database account and Redis user

An error raised on purpose (a CnkiSpiderError) is one line, exit status 2; any other is one line
too, exit 1, naming the log that keeps its traceback; a closed output exits 141 (cli/failing.py).

Exit status of `run` / `recrawl` (and of the .exe): 0 finished (or up to date, or shut down on
request); 1 the crawl stopped for another reason; 2 an error before crawling (above); 3 the task
is halted (CNKI rejected a query, one failure repeats, CNKI cannot be reached): one line on
standard error says why and how to go on (`cnkispider task resume NAME`).
"""

from __future__ import annotations

import argparse
import logging
import sys

from cnkispider.cli import admin, crawl, demo, failing, sessions, status, tasks
from cnkispider.cli.common import CONFIG_HELP, LOG_FORMAT, CommandParser, command_config
from cnkispider.cli.demo import frozen_no_demo
from cnkispider.config import language_hint
from cnkispider.exceptions import CnkiSpiderError
from cnkispider.version import __version__
from cnkispider.words import i18n
from cnkispider.words.i18n import _

__all__ = ["build_parser", "main"]

# argparse's own words ("usage:", "error:", "the following arguments are required") in the
# operator's language too: argparse looks them up with the gettext functions it imported, in the
# standard textdomain, where no catalogue of ours is; pointed at ours, they are read from the
# cnkispider catalogue, which has them (cli/argparse_words.py marks them for the extraction).
# Once, here: every parser of the command line is built after this module is imported.
argparse._ = i18n._
argparse.ngettext = i18n.ngettext


def build_parser() -> argparse.ArgumentParser:
    # --config is accepted anywhere on the line (`cnkispider task list --config x.ini`): every
    # command's parser, and its subcommands' (their parent's class), is a CommandParser
    parser = argparse.ArgumentParser(prog="cnkispider", description=_("Distributed CNKI crawler"))
    parser.add_argument("--config", help=_(CONFIG_HELP))
    parser.add_argument(
        "--version",
        action="version",
        version=f"cnkispider {__version__}",
        help=_("show program's version number and exit"),  # argparse's own default, marked
    )
    sub = parser.add_subparsers(dest="command", parser_class=CommandParser)
    # in this order in `cnkispider --help`
    tasks.add_init_db(sub)
    tasks.add_task(sub)
    crawl.add_run(sub)
    demo.add_demo(sub)
    status.add_status(sub)
    crawl.add_export(sub)
    crawl.add_refresh_counts(sub)
    status.add_probe(sub)
    sessions.add_session(sub)
    status.add_web(sub)
    admin.add_admin(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # the locale's language from the start (argparse's own errors, a config.ini that cannot be
    # read); [ui] language, once config.ini is read, may choose another (common.command_config)
    i18n.activate(language_hint(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    if getattr(sys, "frozen", False) and (argv if argv is not None else sys.argv[1:])[:1] == [
        "demo"
    ]:
        print(frozen_no_demo(), file=sys.stderr)
        return 2
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    short = args.command not in ("run", "recrawl", "demo")  # a crawl's logging is Scrapy's
    if short:  # until the config says where the log goes: warnings only
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    try:
        return args.func(command_config(args, short=short), args)
    except CnkiSpiderError as exc:
        print(_("error: %(problem)s") % {"problem": exc}, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(_("interrupted"), file=sys.stderr)
        return 130
    except BrokenPipeError:  # `cnkispider task list | head -1`
        return failing.closed_pipe()
    except Exception as exc:  # any other: one line, the traceback in the log
        return failing.unexpected(exc)
