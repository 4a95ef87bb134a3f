"""Running the `hiertag` command as on a machine where one Python package is not
installed: a child process in which importing it fails as it does then
(ModuleNotFoundError, "No module named ..."), whatever the venv holds."""

import subprocess
import sys

RUN_WITHOUT = """
import sys

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())
from hiertag.cli import main
sys.exit(main(sys.argv[1:]))
"""


def hiertag_without(package, *arguments, **options):
    """`hiertag ARGUMENTS...` in a child process in which `package` cannot be imported."""
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT.format(hidden=package), *map(str, arguments)],
                          capture_output=True, text=True, **options)
