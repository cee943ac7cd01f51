"""Shared pytest setup. Tests run on CPU; nothing here needs a Blackhole chip.

Four things only make the run faster or lighter and never change what a test checks:

* one JAX persistent compilation cache per pytest run (``jax_compilation_cache_dir``), made by the
  controlling process in a fresh temporary folder and removed when the run ends. The xdist workers and
  every subprocess a test starts (the report, the fake-device meshes) inherit it through the
  environment, so an XLA program compiled by one of them is loaded, not recompiled, by the others.
  Every run starts cold, as on a clean machine. A cache folder set by the caller is used as it is.
* XLA:CPU's LLVM backend at level 0 without its expensive passes (``XLA_FLAGS``, inherited by every
  subprocess; flags the caller set come after ours and win). Most of the suite's programs run once
  or a few times, so their compile time is most of its time. LLVM's optimisation level changes
  the speed of the generated code, not its IEEE results (no fast-math at any level); XLA's own
  passes and emitters are the ones users get. ``tests/test_compile_options.py`` compiles its
  references with XLA's defaults given explicitly, and ``tests/test_report.py`` runs the main job
  without these flags (its full-width numeric sections run slower at level 0 than they compile).
* a worker that holds more than ``RELEASE_RSS_MB`` when a test file ends drops JAX's compiled programs
  and tracing caches (``jax.clear_caches``) and hands the freed heap back to the system (glibc
  ``malloc_trim``). A worker runs dozens of files and would otherwise hold every program it ever
  compiled (8 GB by the end of a run: the AHBM tuner's alone are 3 GB); two such workers and the
  subprocesses the tests start come near the memory of a small CI machine. Below the threshold the
  caches are kept: a later file reuses them (clearing after every file costs ~10% of the run).
  Programs dropped are loaded again from the persistent cache, not recompiled.
* the test files that take longest run first (``make test`` distributes whole files with
  ``--dist loadfile --no-loadscope-reorder``), so no long file starts last while the other worker idles.
"""

import ctypes
import ctypes.util
import gc
import os
import pathlib
import shutil
import sys
import tempfile

import pytest

# Deterministic, quiet CPU runs; keep XLA from grabbing every core's worth of threads per process.
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TEST_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
if TEST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):  # read when the CPU backend starts, after this
    os.environ["XLA_FLAGS"] = f"{TEST_XLA_FLAGS} {os.environ.get('XLA_FLAGS', '')}".strip()

CACHE_DIR_ENV = "JAX_COMPILATION_CACHE_DIR"
# Cache every program, however quick to compile: most of the suite's programs compile in 0.05-0.5 s,
# below JAX's default threshold of 1 s, and together they are most of its time.
CACHE_ENV = {"JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}
CACHE_DIR_KEY = pytest.StashKey[pathlib.Path]()

# Longest first, as measured with `pytest --durations=0` (a file's tests and its module fixtures, one
# process); files not named here follow in collection order. Only the wall time depends on this order.
LONGEST_FIRST = (
    "test_report.py",  # the whole quick report in a subprocess
    "test_ahbm_tune_cli.py",
    "test_ahbm_model.py",
    "test_costmodel_report_plan_kinds.py",
    "test_device_graph.py",
    "test_attention_distributed.py",  # one subprocess on 8 fake devices
    "test_expert_layers.py",
    "test_attention_contract.py",
    "test_device_fast_twin.py",
    "test_ahbm_simulate_vs_model.py",
    "test_costmodel_intervals.py",
    "test_compile_options.py",
    "test_expert_hf_parity.py",
    "test_costmodel_report_signposts.py",
    "test_costmodel_report_plan.py",
    "test_device_parity.py",
    "test_costmodel_holdout.py",
    "test_ahbm_counts.py",
    "test_report_atomic.py",
)


def pytest_configure(config):
    if hasattr(config, "workerinput") or CACHE_DIR_ENV in os.environ:
        return  # an xdist worker (it inherited the controller's cache) or a cache the caller chose
    path = pathlib.Path(tempfile.mkdtemp(prefix="pytest-jax-cache-"))
    config.stash[CACHE_DIR_KEY] = path
    os.environ.update({CACHE_DIR_ENV: str(path), **CACHE_ENV})
    if "jax" in sys.modules:  # a plugin imported JAX before this ran: it read the environment already
        import jax

        jax.config.update("jax_compilation_cache_dir", str(path))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_unconfigure(config):
    path = config.stash.get(CACHE_DIR_KEY, None)
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


RELEASE_RSS_MB = 2048


def resident_mb() -> float | None:
    """This process's resident memory (MB), or None where /proc is not there."""
    try:
        pages = int(pathlib.Path("/proc/self/statm").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.fixture(autouse=True, scope="module")
def release_compiled_programs():
    """After each test file (its own module fixtures are torn down first): above ``RELEASE_RSS_MB`` (or
    when the resident size cannot be read), drop JAX's compiled programs and tracing caches, collect,
    and return the freed heap to the system."""
    yield
    rss = resident_mb()
    if rss is not None and rss < RELEASE_RSS_MB:
        return
    if "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
    gc.collect()
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name is not None else None
    if hasattr(libc, "malloc_trim"):  # glibc only
        libc.malloc_trim(0)


def pytest_collection_modifyitems(config, items):
    """Whole files, longest first (a stable sort: the order inside a file, and of the rest, is kept)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
