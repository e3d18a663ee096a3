"""Coordinate-ascent variational inference with closed-form updates (``algorithm="cavi"``)."""

from inference.closed_form import ClosedFormAlgorithm

ALGORITHM = ClosedFormAlgorithm("cavi", objective="elbo")
