"""The serving loop's decisions, without a model: KV memory in blocks with prefix caching (`blocks`), and which
requests and positions each step runs (`scheduler`). Pure Python: no torch."""

from .blocks import BlockManager, OutOfBlocks, blocks_for
from .scheduler import Pass, Plan, Scheduler, Sequence

__all__ = ["BlockManager", "OutOfBlocks", "Pass", "Plan", "Scheduler", "Sequence", "blocks_for"]
