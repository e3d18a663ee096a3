"""The shared inference layer: SVI, EM, closed-form CAVI and stochastic natural-gradient VI
(``svi-natural``) for every model of the zoo; data in memory, memory-mapped or streamed.

>>> import inference
>>> res = inference.fit("bayesian_gmm", {"x": X}, algorithm="cavi", backend="numpyro", K=10)
"""

from inference.api import ALGORITHMS, fit, get_algorithm, get_backend
from inference.checkpoint import CheckpointError
from inference.compare import compare
from inference.loop import NonFiniteObjectiveError
from inference.result import FitResult, load
from inference.streaming import DataError, StreamEndedError

__all__ = [
    "ALGORITHMS",
    "CheckpointError",
    "DataError",
    "FitResult",
    "NonFiniteObjectiveError",
    "StreamEndedError",
    "compare",
    "fit",
    "get_algorithm",
    "get_backend",
    "load",
]
