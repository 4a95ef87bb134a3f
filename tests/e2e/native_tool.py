"""hiertag's validate, tree and extract for the tests, run in process over the
C++ file layer (core.run_tool: what the `hiertag` command runs)."""

from hiertag import core


def run_tool(*arguments, text=True):
    """The command's run (returncode, stdout, stderr, as subprocess.run names
    them); bytes when `text` is false: nothing decoded away."""
    run = core.run_tool(arguments)
    return run.text() if text else run
