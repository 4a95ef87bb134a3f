"""Prints the pinned requirements of a venv holding torch VERSION: the project's
own (requirements.txt, made for the torch it pins) with torch VERSION instead,
and the pins an older torch needs. Used by scripts/torch_env.sh; the standard
library only (it runs before any venv exists).

usage: python3 scripts/torch_requirements.py VERSION"""

import re
import sys
from pathlib import Path

# (first torch release that needs none of it, package, pin for older torch, why)
FOR_OLDER_TORCH = [
    ((2, 6), "transformers", "transformers==4.57.6",
     "transformers 5 refuses torch < 2.6 ('requires PyTorch >= 2.6'); 4.57 is the last release before it"),
    ((2, 5), "numpy", "numpy==1.26.4", "torch 2.4's wheels are built against NumPy 1"),
]


def release(version):
    match = re.match(r"(\d+)\.(\d+)", version)
    if match is None:
        sys.exit(f"torch_requirements: '{version}' is not a torch version (X.Y.Z)")
    return int(match.group(1)), int(match.group(2))


def main(version):
    older = {package: pin for first, package, pin, _ in FOR_OLDER_TORCH if release(version) < first}
    lines = [f"torch=={version}"]
    for line in (Path(__file__).resolve().parents[1] / "requirements.txt").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        package = re.split(r"[=<>!~\[ ;]", line, maxsplit=1)[0].lower()
        if package == "torch":
            continue
        lines.append(older.get(package, line))
    print("\n".join(lines))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    main(sys.argv[1])
