"""scikit-learn estimators (need scikit-learn): TuckerDecomposer, CPDecomposer."""

from tuckerkit.estimators._estimators import CPDecomposer, TuckerDecomposer

__all__ = ["CPDecomposer", "TuckerDecomposer"]
