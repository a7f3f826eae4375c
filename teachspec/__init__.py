"""teachspec: guessing several tokens at once.

A readable engine for speculative decoding and RadixAttention, with an event log that notebook widgets replay.
The flow is one way: models -> engine -> events -> widgets.
"""

from teachspec.events import EventLog
from teachspec.models import Pair, load_pair

__all__ = ["EventLog", "Pair", "load_pair"]
__version__ = "0.1.0"
