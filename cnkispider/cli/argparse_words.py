"""argparse's own words ("usage:", "positional arguments", "error:", "the following arguments
are required") in the operator's language.

argparse looks its words up with the ``_`` and ``ngettext`` it imported from gettext; the
command line makes them ours (cnkispider/cli/__init__.py), so they are read from the
``cnkispider`` catalogue like every other word. The extraction (``make catalogue``) reads only
what the code marks: the messages of Python 3.11's argparse.py an operator can meet with this
command line are marked here, each exactly as argparse writes it (its placeholders too:
positional ``%s`` and ``%r`` are argparse's, the translation keeps them as they are).
tests/test_cli_words.py checks that each is still argparse's.

Left out: the messages of a programmer's mistake (a conflicting option, a bad ``dest=``), of
features the command line does not use (FileType, ``nargs=N``, a subparsers' title) and the
ones argparse says cannot happen.
"""

from __future__ import annotations

from cnkispider.words.i18n import N_

WORDS = (
    # the help
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    # an error: "cnkispider task add: error: the following arguments are required: name"
    N_("%(prog)s: error: %(message)s\n"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("unrecognized arguments: %s"),
    N_("not allowed with argument %s"),
    N_("ignored explicit argument %r"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("invalid %(type)s value: %(value)r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
)
