"""Pyro's closed-form updates compiled by ``torch.compile``, for fits given ``jit=True``.

Run eagerly, a closed-form update is one torch operation after another: a CAVI iteration of the
Bayesian GMM is about 134 of them, most on the small (K, D, D) parameters, and a chain of
elementwise operations reads and writes its arrays once per operation. torch's compiler
(inductor) fuses such chains into a few generated kernels. On a 2-core CPU a compiled Bayesian
GMM sweep (D=10, K=20, float64) took 0.90x the uncompiled time at N = 100,000, where the two
matrix products over the data are most of the work, and 0.63x at N = 1,000, to the same ELBO to
rounding (docs/algorithms/cavi.md gives the commands). Compiling takes seconds (4 to 15 here,
less once torch's on-disk cache holds the kernels), once per fit.

The first call compiles. An update the compiler cannot handle (no C++ compiler on the machine,
for one; or the ninth compilation of the same update in one process, past torch's
``recompile_limit``) then runs uncompiled, with a one-line warning, and so does every later
call; an error of the update itself is raised as it would be uncompiled.
"""

from __future__ import annotations

import warnings

import torch


class CompiledUpdate:
    """``update(*args)`` compiled by ``torch.compile`` at its first call (see the module); if
    that fails, ``update`` itself from then on."""

    def __init__(self, update, name: str = "update"):
        self.update, self.name = update, name
        self.compiled = torch.compile(update, dynamic=False)
        self.call = None  # chosen at the first call

    def __call__(self, *args):
        if self.call is not None:
            return self.call(*args)
        try:
            # torch compiles one function's code at most recompile_limit times in a process
            # (8), then runs it uncompiled without a word: the ninth fit of an update with new
            # shapes would be. Here that is an error, and the fit says it runs uncompiled.
            with (
                warnings.catch_warnings(),  # the compiler's notices about its own internals
                torch._dynamo.config.patch(fail_on_recompile_limit_hit=True),
            ):
                warnings.simplefilter("ignore", FutureWarning)
                warnings.simplefilter("ignore", DeprecationWarning)
                result = self.compiled(*args)
        except Exception as err:
            result = self.update(*args)  # an error of the update itself is raised here
            warnings.warn(
                f"{self.name} could not be compiled by torch.compile and runs uncompiled "
                f"({_why(err)}).",
                RuntimeWarning,
                stacklevel=2,
            )
            self.call = self.update
            return result
        self.call = self.compiled
        return result


def _why(err: BaseException) -> str:
    if isinstance(err, torch._dynamo.exc.FailOnRecompileLimitHit):
        limit = torch._dynamo.config.recompile_limit
        return (
            f"torch compiles the same code at most {limit} times in a process, its "
            "recompile_limit, and has reached it; torch._dynamo.reset() between fits, or a "
            "higher torch._dynamo.config.recompile_limit, lets it compile again"
        )
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {(lines[0] if lines else '')[:200]}"
