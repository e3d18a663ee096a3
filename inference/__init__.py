"""The shared inference layer: closed-form coordinate-ascent VI and EM, SVI and stochastic
natural-gradient VI (``svi-natural``) for every model of the zoo, and any algorithm a plugin
registers; data in memory, memory-mapped or streamed.

>>> import inference
>>> res = inference.fit("bayesian_gmm", {"x": X}, algorithm="cavi", backend="numpyro", K=10)
"""

from inference import _moved
from inference.algorithm import Algorithm, Info, Problem, Traits
from inference.api import ConcurrentFitError, fit, make_problem
from inference.backends import get_backend
from inference.backends.forking import ForkedProcessError
from inference.compare import compare
from inference.convergence import ConvergenceWarning
from inference.loop import NonFiniteObjectiveError
from inference.persistence.checkpoint import CheckpointError
from inference.persistence.checkpoint_guard import CheckpointInUseError
from inference.registry import (
    get_algorithm,
    list_algorithms,
    load_plugins,
    register_algorithm,
    unregister_algorithm,
)
from inference.result import FitResult, load
from inference.streaming import DataError, StreamEndedError

_moved.install()  # inference.svi and the other paths from before the folders still import

__all__ = [
    "Algorithm",
    "CheckpointError",
    "CheckpointInUseError",
    "ConcurrentFitError",
    "ConvergenceWarning",
    "DataError",
    "FitResult",
    "ForkedProcessError",
    "Info",
    "NonFiniteObjectiveError",
    "Problem",
    "StreamEndedError",
    "Traits",
    "compare",
    "fit",
    "get_algorithm",
    "get_backend",
    "list_algorithms",
    "load",
    "load_plugins",
    "make_problem",
    "register_algorithm",
    "unregister_algorithm",
]
