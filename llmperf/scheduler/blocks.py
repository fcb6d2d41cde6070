"""KV memory in blocks: a pool of `num_blocks` blocks of `block_size` token positions each, lent to sequences on
demand and shared between sequences whose prompts begin alike (PagedAttention, Kwon et al., SOSP 2023).

A sequence's keys and values live in the blocks of its *block table*, in order: position p of the sequence is
offset p % block_size of block table[p // block_size]. Nothing needs to be contiguous, so memory is taken a block
at a time as a sequence grows, and at most one block per sequence is partly empty (internal fragmentation below
one block; no external fragmentation: any free block serves any sequence).

Prefix caching (vLLM's automatic prefix caching): a *full* block is named by a hash of its tokens and of the
hash of the block before it, so the name covers the whole prefix up to the block's end. A new sequence looks its
prompt's full blocks up by name, in order, and shares every block it finds (their keys and values are already
computed: it skips their prefill). Shared blocks are reference-counted; a block whose count falls to 0 is free,
but keeps its contents and its name until it is lent again (least recently freed first), so a later request can
still find it.

Counted as vLLM counts them: `queries` are the prompt tokens looked up, `hits` the tokens found (in tokens, not
blocks). The hash is SHA-256, so no prompt can be written to collide with another's and read its keys.

Invariants (`check_invariants`; tests/test_scheduler.py checks them under Hypothesis): a block is in exactly one of
the free queue or some tables; its reference count is the number of tables that hold it; no table holds a block
twice, and a block two tables hold is a named one (only cached blocks are shared); a cached name maps to a block
that bears it. Pure Python: no torch.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict
from collections.abc import Sequence


class OutOfBlocks(RuntimeError):
    """The pool has fewer free blocks than a request for blocks asked for."""


def block_hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    """The name of a full block holding `tokens`, after the block named `parent` (b"" for a sequence's first)."""
    return hashlib.sha256(parent + array("q", tokens).tobytes()).digest()


def prefix_hashes(tokens: Sequence[int], block_size: int) -> list[bytes]:
    """The names of the full blocks of `tokens`, in order (a last, partial block has none)."""
    names, parent = [], b""
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = block_hash(parent, tokens[start:start + block_size])
        names.append(parent)
    return names


def blocks_for(positions: int, block_size: int) -> int:
    """Blocks that hold `positions` positions: ceil(positions / block_size)."""
    return -(-positions // block_size)


class BlockManager:
    """Lends blocks 0..num_blocks-1 to sequences, counts who holds each, and names full blocks for sharing.

    A sequence is known by an id (any hashable); `tables[id]` is its block table. `allocate(id, n)` appends n
    blocks to it, `free(id)` gives them all back. With `prefix_caching`, `lookup(id, tokens)` starts a sequence
    with the cached blocks of its prompt, and `name_full_blocks(id, tokens)` names each block as it fills.
    """

    def __init__(self, num_blocks: int, block_size: int, prefix_caching: bool = True):
        if num_blocks < 1:
            raise ValueError(f"The KV pool needs at least 1 block, got {num_blocks}.")
        if block_size < 1:
            raise ValueError(f"block_size (token positions per block) must be at least 1, got {block_size}.")
        self.num_blocks, self.block_size, self.prefix_caching = num_blocks, block_size, prefix_caching
        self.ref_counts = [0] * num_blocks
        self.names: list[bytes | None] = [None] * num_blocks  # a full block's name, kept while it is cached
        self.cached: dict[bytes, int] = {}  # name -> block
        self.free_queue: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # lent in this order
        self.tables: dict[object, list[int]] = {}
        self.named: dict[object, tuple[int, bytes]] = {}  # how many of a sequence's first blocks are named; the last name
        self.queries = self.hits = 0  # prompt tokens looked up, and found, in the prefix cache

    @property
    def num_free(self) -> int:
        """Blocks no sequence holds (cached or not): all of them can be lent."""
        return len(self.free_queue)

    @property
    def usage(self) -> float:
        """The share of the pool's blocks that sequences hold (vLLM's kv_cache_usage_perc, 0..1)."""
        return 1 - self.num_free / self.num_blocks

    def peek(self, tokens: Sequence[int]) -> list[int]:
        """The cached blocks `lookup` would find for `tokens`, without taking them or counting the query."""
        found: list[int] = []
        if self.prefix_caching:
            for name in prefix_hashes(tokens[:len(tokens) - 1], self.block_size):
                if name not in self.cached:
                    break
                found.append(self.cached[name])
        return found

    def lookup(self, seq, tokens: Sequence[int], found: list[int] | None = None) -> int:
        """Start sequence `seq`'s table with the cached blocks of `tokens`' prefix, and return how many tokens they
        hold (a multiple of block_size; 0 without prefix caching). The last token is never taken from the cache:
        its pass gives the logits of the next token, so at most len(tokens) - 1 tokens are hits. `found`: what
        `peek(tokens)` returned, if nothing has changed since (the prefix is not hashed again)."""
        if seq in self.tables:
            raise ValueError(f"Sequence {seq!r} already holds blocks: look its prompt up before it holds any.")
        found = self.peek(tokens) if found is None else list(found)
        if self.prefix_caching:
            self.queries += len(tokens)
            self.hits += len(found) * self.block_size
        for block in found:
            self._hold(block)
        self.tables[seq], self.named[seq] = found, (len(found), self.names[found[-1]] if found else b"")
        return len(found) * self.block_size

    def allocate(self, seq, n: int) -> list[int]:
        """Append `n` free blocks to `seq`'s table (creating it) and return them; `OutOfBlocks` if fewer are free.
        A block lent again loses its cached name: its contents will be overwritten."""
        if n > self.num_free:
            raise OutOfBlocks(f"{n} blocks asked for, {self.num_free} free.")
        table = self.tables.setdefault(seq, [])
        self.named.setdefault(seq, (0, b""))
        new = []
        for _ in range(n):
            block, _ = self.free_queue.popitem(last=False)  # the least recently freed
            self._forget(block)
            self.ref_counts[block] = 1
            new.append(block)
        table += new
        return new

    def ensure(self, seq, positions: int) -> bool:
        """Give `seq` enough blocks for `positions` positions, if the pool can; returns whether it holds them."""
        table = self.tables.setdefault(seq, [])
        self.named.setdefault(seq, (0, b""))
        missing = blocks_for(positions, self.block_size) - len(table)
        if missing > self.num_free:
            return False
        if missing > 0:
            self.allocate(seq, missing)
        return True

    def fills(self, seq, computed: int) -> bool:
        """Would `name_full_blocks(seq, tokens, computed)` name a block: has a block of `seq` filled since?"""
        return self.prefix_caching and min(computed // self.block_size, len(self.tables[seq])) > self.named[seq][0]

    def name_full_blocks(self, seq, tokens: Sequence[int], computed: int) -> None:
        """Name every block of `seq` that is full and computed (the first `computed` positions of `tokens` have
        their keys and values written), so that later prompts beginning with the same tokens can share it. A name
        already cached for another block keeps that block (the two hold the same keys)."""
        if not self.prefix_caching:
            return
        table = self.tables[seq]
        done, parent = self.named[seq]
        full = min(computed // self.block_size, len(table))
        for i in range(done, full):
            parent = block_hash(parent, tokens[i * self.block_size:(i + 1) * self.block_size])
            if parent not in self.cached:  # else another block holds the same keys, and stays the one found
                self.cached[parent] = table[i]
                self.names[table[i]] = parent
        if full > done:
            self.named[seq] = (full, parent)

    def free(self, seq) -> None:
        """Give back every block of `seq`: its table ends. Blocks no other table holds join the free queue, the
        table's last first, so that a prompt's first blocks, the likeliest to be shared, stay cached longest."""
        table = self.tables.pop(seq, [])
        self.named.pop(seq, None)
        for block in reversed(table):
            self.ref_counts[block] -= 1
            if self.ref_counts[block] == 0:
                self.free_queue[block] = None

    def _hold(self, block: int) -> None:
        if self.ref_counts[block] == 0:
            del self.free_queue[block]
        self.ref_counts[block] += 1

    def _forget(self, block: int) -> None:
        name = self.names[block]
        if name is not None:
            del self.cached[name]
            self.names[block] = None

    def check(self) -> None:
        """Raise AssertionError if an invariant (the module's docstring) does not hold."""
        check_invariants(self)


def check_invariants(manager) -> None:
    """Raise AssertionError, naming the block, if a block manager's state breaks an invariant of this module's
    docstring. It reads only BlockManager's state (num_blocks, tables, ref_counts, free_queue, cached, names), so it
    checks any manager that keeps the same (assignment 6's hidden tests run it on the students')."""
    holders: list[list] = [[] for _ in range(manager.num_blocks)]
    for seq, table in manager.tables.items():
        assert len(set(table)) == len(table), f"sequence {seq!r}'s table holds a block twice: {list(table)}"
        for block in table:
            holders[block].append(seq)
    for block, held_by in enumerate(holders):
        count, tables = manager.ref_counts[block], f"{len(held_by)} table{'s' * (len(held_by) != 1)}"
        assert count == len(held_by), (f"block {block} is held by {tables} {held_by}: expected its reference count "
                                       f"to be {len(held_by)}, got {count}")
        assert (count == 0) == (block in manager.free_queue), (
            f"block {block} is held by {tables} and is {'' if block in manager.free_queue else 'not '}in the free "
            f"queue: expected a block to be free exactly when no table holds it")
        assert len(held_by) < 2 or manager.names[block] is not None, (
            f"block {block} is held by {tables} {held_by} but has no name: expected only cached blocks to be shared")
    for name, block in manager.cached.items():
        assert manager.names[block] == name, f"a cached name maps to block {block}, which bears another name"
