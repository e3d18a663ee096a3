"""The shared inference layer: SVI, EM and closed-form CAVI for every model of the zoo.

>>> import inference
>>> res = inference.fit("bayesian_gmm", {"x": X}, algorithm="cavi", backend="numpyro", K=10)
"""

from inference.api import ALGORITHMS, fit, get_algorithm, get_backend
from inference.checkpoint import CheckpointError
from inference.compare import compare
from inference.loop import NonFiniteObjectiveError
from inference.result import FitResult, load

__all__ = [
    "ALGORITHMS",
    "CheckpointError",
    "FitResult",
    "NonFiniteObjectiveError",
    "compare",
    "fit",
    "get_algorithm",
    "get_backend",
    "load",
]
