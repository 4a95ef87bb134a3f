"""A verb of the `hiertag` command: its declaration, its parser, and how it
runs (one-line errors, exit status 2, never a traceback).

Each verb is declared once, by its module (hiertag.verbs.NAME):

    '''hiertag report: a Markdown report of a tagged file.

    The details --help prints after the arguments...'''
    VERB = Verb(__doc__, arguments, run)
    main = VERB.main

The docstring's first line names the verb and says what it does: the
`hiertag` command's table reads it without importing the module (synopsis),
and --help prints it. This module imports nothing heavy, so `hiertag --help`
does not load onnx or torch."""

import argparse
import os
import sys


class UsageError(Exception):
    """Bad input or usage: one line on stderr, exit status 2."""


def fail(message):
    raise UsageError(message)


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one-line UsageErrors. An argument
    no option takes is reported before a missing one: argparse checks required
    arguments first, so a misspelt `-o` came out as "-o/--output is required"."""

    def error(self, message):
        raise UsageError(f"{message} ({self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        unrecognized = self._unrecognized(args)
        if unrecognized:
            self.error(f"unrecognized arguments: {' '.join(unrecognized)}")
        return super().parse_args(args, namespace)

    def _unrecognized(self, args):
        """The arguments nothing takes, with every argument made optional for
        the look (argparse would stop at the first missing one)."""
        relaxed = [(item, item.required) for item in [*self._actions, *self._mutually_exclusive_groups]]
        try:
            for item, _ in relaxed:
                item.required = False
            return self.parse_known_args(args)[1]
        finally:
            for item, required in relaxed:
                item.required = required


def first_line(error):
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def one_line(text):
    """`text` with control characters and bytes that were not UTF-8 (os.fsdecode's
    lone surrogates) escaped as the native tool prints names (core/format/printable.h
    Printable): a path or argument holding a newline stays one line."""
    from hiertag import core
    text = str(text)
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate os.fsdecode does not make
        raw = text.encode("utf-8", "backslashreplace")
    return core.printable(raw)


def run_verb(prog, parser, run, argv):
    """Parses `argv` and returns run(options)'s exit status; bad input, and any
    other error, is one line `PROG: ...` on stderr and exit status 2."""
    try:
        options = parser.parse_args(argv)
        return run(options)
    except SystemExit as done:  # --help
        return done.code if isinstance(done.code, int) else 0
    except BrokenPipeError:
        # The reader stopped reading (| head): nothing more to say, and
        # Python's final flush must not fail on the closed pipe either.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except UsageError as error:
        print(f"{prog}: {one_line(error)}", file=sys.stderr)
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
    except Exception as error:  # never a traceback
        print(f"{prog}: {one_line(first_line(error))}", file=sys.stderr)
    return 2


def synopsis(first_line):
    """(name, summary) from a verb module's first docstring line
    "hiertag NAME: SUMMARY."."""
    head, _, summary = first_line.partition(": ")
    program, _, name = head.partition(" ")
    if program != "hiertag" or not name or not summary:
        raise ValueError(f"a verb's docstring starts 'hiertag NAME: SUMMARY.', not {first_line!r}")
    return name, summary.strip().removesuffix(".")


class Verb:
    """One verb, declared once: `doc`, its module's docstring (first line
    "hiertag NAME: SUMMARY.", the rest --help's epilog); `arguments(parser)`
    adds its arguments; `run(options)` returns its exit status. `epilog`:
    text --help prints after the docstring's."""

    def __init__(self, doc, arguments, run, epilog=""):
        first, _, rest = doc.strip().partition("\n")
        self.name, self.summary = synopsis(first)
        self.prog = f"hiertag {self.name}"
        self.details = rest.strip("\n") + (f"\n\n{epilog}" if epilog else "")
        self.arguments = arguments
        self.run = run

    def parser(self):
        parser = Parser(prog=self.prog, description=f"{self.summary}.", epilog=self.details or None,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
        self.arguments(parser)
        return parser

    def main(self, argv=None):
        """The verb on `argv` (default: the process's arguments): its exit status."""
        return run_verb(self.prog, self.parser(), self.run, sys.argv[1:] if argv is None else argv)
