import pytest

from hiertag import zoo
from tests.e2e.exportable import export_in_subprocess, note_plain_exports


@pytest.fixture(scope="session")
def never_loaded_exports():
    """({name: bytes}, {name: failure}): the exports of a process that never loaded hiertag
    (a failure: export_plain.py's record of torch's error)."""
    files, errors = export_in_subprocess(list(zoo.ALL))
    note_plain_exports(files, errors)
    return files, errors


@pytest.fixture(scope="session")
def flag_off_exports():
    """({name: bytes}, {name: failure}): exports of a process that loaded hiertag, with HIERTAG=0."""
    return export_in_subprocess(list(zoo.ALL), load_plugin=True, hiertag="0")
