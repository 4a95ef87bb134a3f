"""hiertag's validate, tree and extract for the tests, run in process over the
C++ file layer (core.run_tool: what the `hiertag` command runs), with
subprocess.run's result."""

import subprocess

from hiertag import core


def run_tool(*arguments, text=True):
    """The command's (returncode, stdout, stderr) as subprocess.run gives them;
    bytes when `text` is false: nothing decoded away."""
    arguments = [str(argument) for argument in arguments]
    status, out, err = core.run_tool(arguments)
    if text:
        out, err = out.decode(), err.decode()
    return subprocess.CompletedProcess(arguments, status, out, err)
