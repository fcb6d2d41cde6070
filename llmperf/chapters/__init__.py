"""Each chapter's experiments, as package code: what the notebook runs, a unit test runs on the tiny preset,
and `python -m llmperf.reference` runs on a GPU machine with no Jupyter.

One package per chapter, named after what it measures (each package's docstring says which of
its modules holds what):

    chain      1. the dependency chain
    prefill    2. prefill cost
    intensity  3. decode intensity and the roofline
    caching    4. naive against cached generation
    anatomy    5. the anatomy of one decode step
    serving    6. serving metrics on a real server

Each holds the chapter's experiment functions, which take the chapter's setup
(`setup.setup()`: device, dtype, sizes, model) and return a result record; the
record's `check()` is what the chapter's last cell asserts (and its unit test
calls), and the sentences about a result are chosen from the record's numbers.
`setup` picks the device, the dtype and the sizes; `llmperf.wording` is the few
words the sentences share.
"""
