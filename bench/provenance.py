"""Where a measurement ran: the commit, whether the tree held uncommitted changes,
and the binaries it loaded (a committed result names all three; issues 17 and 48,
"figures with provenance"); and build/ brought up to date with that checkout before
a measurement runs what it built."""

import fcntl
import hashlib
import importlib.machinery
import platform
import re
import subprocess
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git_state():
    """{"commit": short hash, "uncommitted_changes": bool}; both None outside a checkout.
    bench/results/ is left out: it holds what the measurements write, not what they ran."""
    def git(*args):
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT, check=True).stdout.strip()
    try:
        return {"commit": git("rev-parse", "--short", "HEAD"),
                "uncommitted_changes": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                                                  ":(exclude)bench/results"))}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "uncommitted_changes": None}


# What the exports measured run from build/: the plugin (a loader and the
# passes it loads), the native tool and the package's core module (hiertag._core),
# which score the files.
EXPORT_TARGETS = ("hiertag_plugin", "hiertag_python", "hiertag_cli", "hiertag_core_module")
SCALING_TARGET = "hiertag_pass_scaling"


# The binaries an export measured loads from a build folder: the plugin (its loader
# and the passes it loads), the core as Python's extension module (hiertag._core,
# _core.cpython-*.so) and the native tool; what EXPORT_TARGETS build.
EXPORT_BINARIES = ("libhiertag.so", "libhiertag_python.so", "_core", "hiertag")


def binary_hashes(binaries=EXPORT_BINARIES, directory=None):
    """{binary: the first 12 hex digits of its SHA-256} of the files a measurement
    loads from `directory` (default build/; "_core" is Python's extension module
    there), "missing" for one not there: what ran, which the commit names only
    when build_targets made them from the checkout it names."""
    directory = Path(directory) if directory is not None else ROOT / "build"
    found = {}
    for binary in binaries:
        path = directory / (f"_core{importlib.machinery.EXTENSION_SUFFIXES[0]}" if binary == "_core" else binary)
        found[binary] = hashlib.sha256(path.read_bytes()).hexdigest()[:12] if path.is_file() else "missing"
    return found


def state(binaries=EXPORT_BINARIES, directory=None):
    """What a result records of where it ran, taken after build_targets and before the
    run (a commit or a build made while it ran is not what ran): git_state() and
    {"binaries": binary_hashes(...)}, with {"binaries_from": directory} when they are
    not build/'s (an installed package, another build folder)."""
    found = {**git_state(), "binaries": binary_hashes(binaries, directory)}
    where = Path(directory).resolve() if directory is not None else ROOT / "build"
    if where != (ROOT / "build").resolve():
        found["binaries_from"] = str(where.relative_to(ROOT) if where.is_relative_to(ROOT) else where)
    return found


def build_targets(*targets):
    """Brings build/'s TARGETS up to date with the checkout (`cmake --build` with
    the cmake that configured it; a no-op when they are), so what a measurement
    runs is what git_state names. One build at a time (build/.measure.lock:
    pytest runs two processes). None when they are up to date; else the one-line
    reason they could not be, with the log (build/measure-build.log)."""
    build = ROOT / "build"
    cache = build / "CMakeCache.txt"
    if not cache.exists():
        return "build/ is not configured: run scripts/build.sh first"
    found = re.search(r"^CMAKE_COMMAND:INTERNAL=(.+)$", cache.read_text(errors="replace"), re.MULTILINE)
    cmake = found.group(1) if found else "cmake"
    log = build / "measure-build.log"
    try:
        with open(build / ".measure.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            done = subprocess.run([cmake, "--build", str(build), "-j2", "--target", *targets],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
            log.write_text(done.stdout)  # under the lock: the other process's build does not overwrite it
    except OSError as error:
        return f"cmake could not run: {error}"
    if done.returncode != 0:
        lines = done.stdout.strip().splitlines()
        first = next((line for line in lines if re.search(r"error", line, re.IGNORECASE)), lines[-1] if lines else "")
        return (f"building {' '.join(targets)} failed (exit {done.returncode}): {first.strip()[:200]} "
                f"(log: {log.relative_to(ROOT)})")
    return None


def build_what_loads(directory):
    """build_targets(*EXPORT_TARGETS) when `directory`, the folder a measurement loads
    hiertag's binaries from (the package's: Path(hiertag.library_path()).parent), is
    build/, a checkout's; None, building nothing, for another folder (an installed
    package's, another build's), which the checkout does not make: state() names its
    binaries by their hashes and where they came from."""
    if Path(directory).resolve() != (ROOT / "build").resolve():
        return None
    return build_targets(*EXPORT_TARGETS)


def describe(state):
    """'commit abc1234, clean tree', or 'commit abc1234 (with uncommitted changes)'
    when the tree had them ('commit abc1234' alone when that is not known); then,
    when the state holds them, the binaries' hashes: '; binaries (sha256)
    libhiertag.so=0123456789ab ...' (' from DIR' when not build/'s)."""
    if not state.get("commit"):
        described = "no commit known"
    else:
        clean = state.get("uncommitted_changes")
        described = f"commit {state['commit']}" + {True: " (with uncommitted changes)",
                                                   False: ", clean tree"}.get(clean, "")
    if state.get("binaries"):
        described += ("; binaries (sha256) "
                      + " ".join(f"{name}={digest}" for name, digest in state["binaries"].items())
                      + (f" from {state['binaries_from']}" if state.get("binaries_from") else ""))
    return described


def out_option(out):
    """' --out DIR' for a report's recorded command, or '' when DIR is
    bench/results, where the committed results lie."""
    return "" if Path(out).resolve() == (ROOT / "bench" / "results").resolve() else f" --out {out}"


def ran(results):
    """'Run DATE, commit abc1234, clean tree; CPU, N cores; torch V, ...': a
    report's line of where it ran, from its results ({date, commit,
    uncommitted_changes, machine: harness.machine()})."""
    m = results["machine"]
    return (f"Run {results['date']}, {describe(results)}; {m['cpu']}, {m['cores']} cores; "
            + ", ".join(f"{package} {version}" for package, version in m["versions"].items()) + ".")


# The vector extensions ONNX Runtime picks its kernels and graph layouts by: its
# optimized graphs (NCHWc) and quantized results differ between such machines.
VECTOR_EXTENSIONS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")


def cpu():
    """'AMD EPYC (avx2)': the CPU's model name and the vector extensions it has."""
    model, flags = None, set()
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model is None:
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    model = model or platform.processor() or "unknown CPU"
    found = [flag for flag in VECTOR_EXTENSIONS if flag in flags]
    return f"{model} ({', '.join(found)})" if found else model


def versions(*packages):
    """{"python": ..., each package: its installed version or "not installed", "cpu": cpu()}:
    what a result depends on besides the commit."""
    found = {"python": platform.python_version()}
    for package in packages:
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["cpu"] = cpu()
    return found
