"""The scheduler and its block manager, without a model: Hypothesis schedules with arrivals, cancellations, small
pools and shared prompt prefixes.

A fake pool records, for every block and offset, which token's keys and values were written there; each pass
writes its positions through the sequence's block table, and every position a pass reads must hold that
sequence's own token. So sharing a block that holds other tokens, or writing into a shared one, fails the test.
"""

import random

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from llmperf.request import Request
from llmperf.scheduler import BlockManager, Scheduler
from llmperf.scheduler.blocks import OutOfBlocks, check_invariants, prefix_hashes


class FakeModel:
    """Writes each pass's tokens into a pool of (block, offset) cells and checks what each pass reads."""

    def __init__(self, scheduler):
        self.s, self.bs = scheduler, scheduler.blocks.block_size
        self.pool: dict[tuple[int, int], int] = {}

    def write_and_read(self, seq, start, end):
        table, tokens = self.s.blocks.tables[seq.id], seq.tokens
        for p in range(start, end):
            block = table[p // self.bs]
            assert self.s.blocks.ref_counts[block] == 1 or p < start, "a pass writes into a shared block"
            self.pool[block, p % self.bs] = tokens[p]
        for p in range(end):
            assert self.pool.get((table[p // self.bs], p % self.bs)) == tokens[p], (seq.id, p)

    def step(self, plan, rng):
        sampled = []
        for p in plan.prefills:
            for seq in p.seqs:
                self.write_and_read(seq, p.start, min(seq.num_tokens, p.start + p.n))
            if p.samples:
                sampled += p.seqs
        self.sample(sampled, rng)
        plan.decodes = self.s.decodable(plan)
        for seq in plan.decodes:
            self.write_and_read(seq, seq.num_tokens - 1, seq.num_tokens)
        self.sample(plan.decodes, rng)

    @staticmethod
    def sample(seqs, rng):
        for seq in seqs:
            r = seq.request
            r.tokens.append(rng.randrange(4))  # few distinct tokens: answers share blocks too
            if len(r.tokens) == r.max_tokens:
                r.finish_reason = "length"


prompt = st.lists(st.integers(0, 3), min_size=1, max_size=20)
request = st.tuples(st.sampled_from(["shared", "own"]), prompt, st.integers(1, 12), st.integers(0, 3),
                    st.one_of(st.none(), st.integers(0, 10)))


@settings(max_examples=500, deadline=None)
@given(requests=st.lists(request, min_size=1, max_size=8), block_size=st.integers(1, 5), spare=st.integers(0, 3),
       max_num_seqs=st.integers(1, 5), chunk=st.integers(1, 24), policy=st.sampled_from(["continuous", "static"]),
       caching=st.booleans(), reserve=st.booleans(), seed=st.integers(0, 99))
def test_any_schedule_keeps_the_blocks_right(requests, block_size, spare, max_num_seqs, chunk, policy, caching,
                                             reserve, seed):
    rng = random.Random(seed)
    shared = [1, 2, 3, 1, 2, 3, 0, 0, 1]
    context = max(len((shared + p)[:20] if kind == "shared" else p) + n for kind, p, n, _, _ in requests)
    blocks = -(-context // block_size) + spare  # one full-context sequence fits, as the engine requires
    s = Scheduler(blocks, block_size, max_num_seqs, chunk, policy, caching, reserve=context if reserve else None)
    model, sent = FakeModel(s), []
    step = 0
    while step < 400 and (step <= 8 or not s.idle):
        for kind, p, n, arrives, cancel in requests:
            if arrives == step:
                r = Request((shared + p)[:20] if kind == "shared" else p, n)
                s.add(r)
                sent.append((r, None if cancel is None else step + cancel))
        for r, cancel in sent:
            if cancel == step:
                s.cancel(r.id)
        plan = s.schedule()
        for r in plan.cancelled:
            r.finish_reason = "cancelled"
        positions = sum(len(p.seqs) * p.n for p in plan.prefills)
        assert positions <= chunk, f"step {step} prefilled {positions} positions, more than {chunk}"
        assert s.active <= max_num_seqs and (policy != "static" or not plan.admitted or s.active == plan.admitted)
        model.step(plan, rng)
        s.update(plan)
        s.blocks.check()  # among them: no table holds a block twice, and only named blocks are shared
        step += 1
    assert s.idle, "the scheduler never finished"
    assert all(r.done for r, _ in sent), "a request neither finished nor was refused"
    assert s.blocks.num_free == blocks and not s.blocks.tables, "blocks were not all given back"
    assert s.blocks.hits <= s.blocks.queries
    event(f"preempted: {s.preemptions > 0}")
    event(f"prefix hits: {s.blocks.hits > 0}")


def test_a_shared_prefix_is_found_in_tokens_and_skips_its_prefill():
    s = Scheduler(num_blocks=16, block_size=4, max_num_seqs=4, prefill_chunk=64)
    first = Request(list(range(10)), 2)
    s.add(first)
    plan = s.schedule()
    assert [(p.start, p.n) for p in plan.prefills] == [(0, 10)]
    first.tokens.append(7)
    s.update(plan)
    second = Request(list(range(9)) + [99], 2)  # the same first 9 tokens: two full blocks of 4
    s.add(second)
    plan = s.schedule()
    assert [(p.start, p.n) for p in plan.prefills] == [(8, 2)]  # 8 positions found cached
    assert s.blocks.tables[second.id][:2] == s.blocks.tables[first.id][:2]
    assert (s.blocks.queries, s.blocks.hits) == (20, 8)  # in tokens, as vLLM counts them


def test_the_whole_prompt_cached_still_runs_its_last_token():
    s = Scheduler(num_blocks=8, block_size=4, max_num_seqs=2, prefill_chunk=64)
    for _ in range(2):
        r = Request(list(range(8)), 1)
        s.add(r)
        plan = s.schedule()
        r.tokens.append(0)
        r.finish_reason = "length"
        s.update(plan)
    assert [(p.start, p.n) for p in plan.prefills] == [(4, 4)]  # one block cached: the last token's is recomputed


def test_running_out_preempts_the_newest_which_recomputes_later():
    s = Scheduler(num_blocks=4, block_size=2, max_num_seqs=2, prefill_chunk=64)
    old, new = Request([1, 2, 3], 4), Request([4, 5, 6], 4)  # each needs 2 blocks now, 3 by its end
    s.add(old)
    s.add(new)
    preempted, model, rng = [], FakeModel(s), random.Random(0)
    for _ in range(20):
        plan = s.schedule()
        preempted += [q.request for q in plan.preempted]
        model.step(plan, rng)
        s.update(plan)
        if s.idle:
            break
    assert preempted and set(map(id, preempted)) == {id(new)} and s.preemptions == len(preempted)
    assert old.done and new.done and len(new.tokens) == 4 and s.recomputed > 0


def test_block_manager_refuses_and_forgets():
    m = BlockManager(2, 2)
    m.allocate("a", 2)
    with pytest.raises(OutOfBlocks, match="1 blocks asked for, 0 free"):
        m.allocate("b", 1)
    m.name_full_blocks("a", [1, 2, 3, 4], 4)
    m.free("a")
    assert m.num_free == 2 and len(m.cached) == 2  # free, yet still cached
    m.allocate("b", 1)  # lends the least recently freed (a table's last block is freed first) and forgets its name
    assert len(m.cached) == 1 and m.peek([1, 2, 3, 4, 5]) == [0]  # the prompt's first block is still found
    assert len(prefix_hashes([1, 2, 3], 2)) == 1


def test_the_invariant_check_names_the_block():
    m = BlockManager(4, 2)
    m.lookup("a", [1, 2, 3])
    m.ensure("a", 3)
    m.name_full_blocks("a", [1, 2, 3], 3)
    m.lookup("b", [1, 2, 3])
    m.check()
    m.ref_counts[0] += 1  # a free that forgot to drop one reference: block 0 could never be lent again
    with pytest.raises(AssertionError, match=r"block 0 is held by 2 tables \['a', 'b'\]: expected its reference "
                                             r"count to be 2, got 3"):
        check_invariants(m)
    m.ref_counts[0] -= 1
    m.tables["b"].append(0)
    with pytest.raises(AssertionError, match=r"sequence 'b'.s table holds a block twice: \[0, 0\]"):
        m.check()
    m.tables["b"] = [1]
    m.ref_counts[0], m.ref_counts[1] = 1, 2
    with pytest.raises(AssertionError, match="block 1 is held by 2 tables .* but has no name"):
        m.check()


@pytest.mark.parametrize("kwargs, message", [
    (dict(num_blocks=0), "at least 1 block"), (dict(block_size=0), "block_size"),
    (dict(max_num_seqs=0), "max_num_seqs"), (dict(prefill_chunk=0), "prefill_chunk"),
    (dict(policy="fifo"), "Unknown batching policy"),
])
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Scheduler(**{"num_blocks": 4, **kwargs})
