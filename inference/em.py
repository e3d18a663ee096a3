"""Expectation-maximisation with closed-form updates (``algorithm="em"``)."""

from inference.closed_form import ClosedFormAlgorithm

ALGORITHM = ClosedFormAlgorithm("em", objective="log_likelihood")
