"""Learners behind one protocol: `Learner` (the contract) and `LocalLearner` (this process).

The data-parallel and Ray learners live in `ulorl.distributed` and implement the same protocol.
"""

from ulorl.learners.base import Learner
from ulorl.learners.local import LocalLearner

__all__ = ["Learner", "LocalLearner"]
