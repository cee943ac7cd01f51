"""XLA options for the cost models' jitted graphs, and the ``jit`` that applies them.

A cost-model graph is wide and shallow: thousands of scalar elementwise ops (maxima, ceilings,
smooth maxima, one branch per pipelining option), few FLOPs, compiled once per static option
(case, reduce kind, placement, config) and then run in microseconds. Its compile time is most of
a tune or a study. XLA:CPU's MLIR fusion emitters spend far longer generating such graphs than its
elemental IR emitter, whose code is as fast here, and the numbers are the same (both lower the
same HLO; ``tests/test_compile_options.py`` checks this on each model). Three option sets:

* ``COMPILE`` for graphs that are run many times (a benchmark's sweeps over a million configs, a
  fit's Adam loop): the elemental emitter, LLVM at its default level.
* ``FAST_COMPILE`` for graphs that are run a handful of times (a Jacobian per fit iteration, an
  evaluation, an exhaustive search's one sweep, a tuner's one descent): also LLVM at level 0
  without its expensive passes, whose code runs slower.
* ``SMALL_COMPILE`` for small graphs compiled by the hundreds (the Blackhole fit's one program per op
  spec): also one LLVM module per program. XLA:CPU splits a program's code into ~30 modules by
  default, and each holds memory mappings of its own: ~90 per program against ~6 in one module
  (``tests/test_compile_options.py``). A process that compiled ~750 such programs ran out of mappings
  (Linux's default ``vm.max_map_count``, 65530): LLVM's "Cannot allocate memory", then a segfault. One
  module also compiles a small graph faster; a large one (an AHBM case) compiles slower on one thread,
  so the other sets keep XLA's split.

The options are XLA:CPU debug options; another backend ignores them.
"""

from __future__ import annotations

import functools

import jax

COMPILE = {"xla_cpu_use_fusion_emitters": False}
FAST_COMPILE = {**COMPILE, "xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}
SMALL_COMPILE = {**FAST_COMPILE, "xla_cpu_parallel_codegen_split_count": 1}


def jit(fun=None, /, *, fast: bool = False, options: dict | None = None, **kwargs):
    """``jax.jit(fun, **kwargs)`` compiled with ``FAST_COMPILE`` (``fast``) or ``COMPILE`` options, or
    ``options`` where given (another user's set: ``device.emulation.COMPILER_OPTIONS``); usable as
    ``@jit`` or ``@functools.partial(jit, static_argnames=...)``. Called inside another trace (a
    caller's ``jax.jit`` / ``grad`` / ``vmap`` of it) it is a plain ``jax.jit``: XLA takes compile
    options only for the outermost program, which is the caller's."""
    if fun is None:
        return lambda f: jit(f, fast=fast, options=options, **kwargs)
    opts = options if options is not None else FAST_COMPILE if fast else COMPILE
    top = jax.jit(fun, compiler_options=opts, **kwargs)
    nested = jax.jit(fun, **kwargs)

    @functools.wraps(fun)
    def call(*args, **kw):
        traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((args, kw)))
        return (nested if traced else top)(*args, **kw)

    call.lower = top.lower
    return call
