"""Reference runs, as made: `python -m llmperf.reference --out references/NAME.json` runs every chapter's
experiments on this machine and writes one reference file.

It sits above the chapters (it runs them); what a reference file holds, and how
the chapters read and show it, is `llmperf.references`, below them.

    runner    what runs, on which setup (real or random weights), and the environment it records
    __main__  the command line
"""
